"""Chit-chat for the recall bench's conversations: a combinatorial grammar, not a few templates.

Real conversations are mostly talk that answers nothing: plans, complaints, reactions, other
people's news. A generator whose filler comes from a handful of sentences makes that talk
repeat itself word for word, which a ranker that penalises repeated words exploits and real
chat would not allow. Here a turn is an optional opener, one of many clause shapes filled from
word lists (people, places, food, media, weather, feelings, times of day), and an optional
follow-up: some 10^9 distinct turns, of 6 to 40 words.

Part of the talk is **distractors**: other people's moves, jobs, pets, trips and instruments,
which share the words the questions ask with ("live", "work", "cat", a city's name) and answer
none of them. Every draw goes through the caller's ``random.Random``: same seed, same talk.
"""

from __future__ import annotations

import random

# Third parties of the talk (never the two speakers: the generator passes those to avoid).
PEOPLE = ["Anouk", "Bea", "Cyril", "Dario", "Edda", "Femi", "Gus", "Hanne", "Ilya", "Jara", "Kofi", "Lena",
          "Milo", "Noor", "Otto", "Pia", "Rafa", "Sune", "Toni", "Uma", "Vera", "Wim", "Yara", "Zeno",
          "Agnes", "Bram", "Cleo", "Dov", "Esme", "Finn"]
RELATIONS = ["my neighbour", "a colleague", "my flatmate", "an old school friend", "my landlord", "my boss",
             "the guy at the gym", "my dentist", "a friend from choir", "my partner's cousin"]
PLACES = ["the bakery on the corner", "the new ramen place", "the library", "the park by the river",
          "the swimming pool", "the hardware shop", "the flea market", "the station", "the old cinema",
          "the climbing hall", "the harbour", "the botanical garden", "the night market", "the town hall",
          "the second-hand bookshop", "the allotment", "the ice rink", "the tram depot"]
FOODS = ["lentil soup", "a mushroom risotto", "dumplings", "a lemon tart", "tacos", "a tray of roast vegetables",
         "banana bread", "a curry", "pancakes", "falafel wraps", "a chickpea stew", "gnocchi", "a plum cake",
         "fried rice", "a big salad", "shakshuka"]
MEDIA = ["a documentary about deep-sea fish", "that detective series everyone talks about",
         "a podcast on the history of maps", "an old western", "a novel set on a lighthouse",
         "a cooking competition", "a stand-up special", "a biography of a chess player",
         "the new animated film", "an audiobook about bees", "a thriller with a terrible ending",
         "a travel vlog about night trains"]
WEATHER = ["pouring rain", "a heatwave", "fog all morning", "a surprise hailstorm", "bright cold sunshine",
           "strong wind", "the first snow", "muggy grey skies", "a thunderstorm at night"]
FEELINGS = ["exhausted", "weirdly energetic", "a bit homesick", "pretty content", "restless", "cheerful",
            "grumpy", "relieved", "distracted", "sleepy", "proud of myself", "overwhelmed"]
TIMES = ["yesterday", "this morning", "last night", "on Saturday", "over the weekend", "on my lunch break",
         "after dinner", "before breakfast", "on the way home", "on Tuesday evening"]
CHORES = ["sorting the recycling", "fixing a wobbly shelf", "repainting the hallway", "doing my taxes",
          "cleaning the oven", "defrosting the freezer", "replacing a bike tyre", "ironing a mountain of shirts",
          "clearing out the garage", "untangling fairy lights", "descaling the kettle"]
THINGS = ["umbrella", "phone charger", "library card", "house keys", "headphones", "travel mug", "scarf",
          "bike lock", "sunglasses", "wallet"]
ADJECTIVES = ["surprisingly good", "a bit disappointing", "way too long", "hilarious", "oddly relaxing",
              "completely chaotic", "better than expected", "quite moving", "forgettable", "strangely addictive"]
# Words the questions ask with, in other people's mouths: the distractors' fill.
D_CITIES = ["Lisbon", "Porto", "Valencia", "Krakow", "Ghent", "Tampere", "Bologna", "Lyon", "Utrecht", "Graz",
            "Bergen", "Cork", "Seville", "Brno", "Turku", "Malmo", "Leipzig", "Nantes", "Aarhus", "Split"]
D_PETS = ["cat", "dog", "parrot", "rabbit", "tortoise", "ferret", "hamster", "goldfish"]
D_JOBS = ["nurse", "teacher", "data analyst", "electrician", "architect", "pharmacist", "chef", "translator"]
D_INSTRUMENTS = ["guitar", "violin", "cello", "ukulele", "keyboard", "drums", "saxophone", "flute"]
D_HOBBIES = ["bouldering", "pottery", "birdwatching", "sourdough baking", "sea kayaking", "chess",
             "watercolour painting", "knitting", "trail running", "salsa dancing"]

OPENERS = ["", "", "", "Honestly, ", "Ha, ", "Oh, ", "So, ", "Well, ", "To be fair, ", "Funny you say that, ",
           "Ugh, ", "Right, ", "Okay so ", "Not gonna lie, ", "By the way, ", "Random thought: ", "Hmm, ",
           "Oh man, ", "Anyway, ", "You know what, "]
FOLLOW_UPS = ["", "", "", " What about you?", " How's your week going?", " Do you know what I mean?",
              " Anyway, enough about that.", " I'll tell you more later.", " Have you ever tried that?",
              " It made my day, honestly.", " Not sure what to make of it.", " We should do that together.",
              " Remind me to send you a photo.", " Still thinking about it.", " Long story.",
              " You would have laughed.", " That's life, I guess."]

# Clause shapes: {p} a third party, {r} a relation, {pl} a place, {f} food, {m} media, {w}
# weather, {fe} a feeling, {t} a time, {c} a chore, {th} a thing, {a} an adjective; the
# distractors' {dc} city, {dp} pet, {dj} job, {di} instrument, {dh} hobby.
CLAUSES = [
    "I made {f} {t} and it was {a}.",
    "{t} I watched {m}, it was {a}.",
    "we had {w} here {t}, so I stayed in.",
    "I feel {fe} today, no idea why.",
    "I spent {t} {c}, which took forever.",
    "I lost my {th} again, probably at {pl}.",
    "{r} recommended {pl}, so we went {t}.",
    "{p} and I grabbed {f} at {pl} {t}.",
    "I keep meaning to go to {pl} but never manage it.",
    "{t} I was {fe} after {c}.",
    "the queue at {pl} was ridiculous {t}.",
    "{p} sent me a link to {m}, have you seen it?",
    "I finally finished {m}; the ending was {a}.",
    "with all this {w} I just want {f} and a blanket.",
    "{r} borrowed my {th} and hasn't given it back.",
    "I tried cooking {f} from a video and it was {a}.",
    "{p} was telling me about {m}, sounds {a}.",
    "we walked past {pl} {t}, it's been renovated.",
    "I'm {fe}, too much {c} this week.",
    "did you see the {w} forecast? I'm already {fe}.",
    "{r} is obsessed with {m} lately.",
    "I bumped into {p} at {pl} {t}, small world.",
    "I should stop buying {f} at {pl}, it's getting expensive.",
    "{t} I finally got round to {c}.",
    "my {th} broke {t}, typical.",
    "{p} is organising a picnic at {pl} if the {w} holds off.",
    "nothing much, {c} and then {m} {t}.",
    "I was {fe} all day {t}, then I had {f} and felt better.",
    # Distractors: the question words, about other people, answering nothing asked.
    "{p} just moved to {dc}, she says the rent is lower there.",
    "{r} keeps talking about moving to {dc} one day.",
    "{p}'s {dp} got out again {t}, the whole street was looking for it.",
    "{r} is thinking about adopting a {dp}, I told them to wait.",
    "{p} started a new job as a {dj} and already hates the commute.",
    "{r} works for a company in {dc} now, fully remote.",
    "{p} is learning the {di}, the neighbours are not thrilled.",
    "{r} plays the {di} in a band, they have a gig at {pl}.",
    "{p} booked a trip to {dc} to see her family.",
    "{r} got really into {dh} and won't stop talking about it.",
    "I read that {dc} is lovely in spring, maybe someday.",
    "{p} lives near {pl}, lucky her.",
    "{r} has a {dp} that only eats {f}, can you imagine.",
    "{p}'s sister is a {dj} in {dc}.",
]


def pick(rng: random.Random, items: list[str]) -> str:
    return items[rng.randrange(len(items))]


def turn(rng: random.Random, avoid: frozenset[str] = frozenset()) -> str:
    """One chit-chat turn (one or two clauses) with an opener and a follow-up; ``avoid``:
    names it must not use (the conversation's speakers)."""
    people = [p for p in PEOPLE if p not in avoid]
    fill = {"p": lambda: pick(rng, people), "r": lambda: pick(rng, RELATIONS), "pl": lambda: pick(rng, PLACES),
            "f": lambda: pick(rng, FOODS), "m": lambda: pick(rng, MEDIA), "w": lambda: pick(rng, WEATHER),
            "fe": lambda: pick(rng, FEELINGS), "t": lambda: pick(rng, TIMES), "c": lambda: pick(rng, CHORES),
            "th": lambda: pick(rng, THINGS), "a": lambda: pick(rng, ADJECTIVES),
            "dc": lambda: pick(rng, D_CITIES), "dp": lambda: pick(rng, D_PETS), "dj": lambda: pick(rng, D_JOBS),
            "di": lambda: pick(rng, D_INSTRUMENTS), "dh": lambda: pick(rng, D_HOBBIES)}
    clauses = [_fill(pick(rng, CLAUSES), fill) for _ in range(1 if rng.random() < 0.7 else 2)]
    text = pick(rng, OPENERS) + " Also, ".join(clauses) + pick(rng, FOLLOW_UPS)
    return text[0].upper() + text[1:]


def _fill(clause: str, fill: dict[str, object]) -> str:
    out, rest = [], clause
    while "{" in rest:
        before, _, after = rest.partition("{")
        name, _, rest = after.partition("}")
        out += [before, fill[name]()]  # type: ignore[operator]
    return "".join([*out, rest])
