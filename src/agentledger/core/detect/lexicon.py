"""The word classes of the languages the detector learnt after its first 22.

``address.py`` holds one regex per class and per language for the first 22 languages, each class
a tuple that reads across them. The languages added since are kept here instead, one block per
language with all of its classes together, so that a speaker can read, check and correct one
language without looking through thirteen tuples; ``address.py`` appends them to its classes
(``of``) and ``language.py`` takes their function words and codes (``KNOWN``).

Each block maps a class name to a regex (matched case-insensitively, on NFKC-normalised text,
like the classes in ``address.py``):

- ``agent``: words for the assistant or AI (may also name a person: "asistent");
- ``ai_terms``: words that name an AI and never a person ("umetna inteligenca", "tekoäly");
- ``directive``: what is asked: a duty or an order (modal verbs, "please", "always", "never",
  "from now on", "remember", "without confirmation", "tell them"), never an ordinary verb;
- ``you``: second-person pronouns and possessives (and the possessed forms of "memory" in the
  languages that say "your" with a suffix);
- ``principal``: someone claiming to command the agent (administrator, developers, account
  owner, "the user has asked");
- ``instructions``, ``memory``, ``conversation``, ``outputs``: the four parts of
  ``address.HOLDS`` (earlier instructions and the system prompt; the agent's memory, not a
  memory card; conversation history, all messages, user data and profiles; every answer, every
  user, later conversations);
- ``long_term`` and ``save``: long-term memory, or "permanently" next to a verb of saving, and an
  order to save;
- ``vocative``: the agent greeted or labelled by its job, with the mark that ends a vocative;
- ``describing``: words that say a text describes an attack (attack, attacker, researchers), for
  the mention rule: a quoted order in such a text is a mention;
- ``function_words``: 40 to 80 closed-class words, space-separated and lowercase, for
  ``language.py``'s coverage test.

The instruction patterns know none of these languages, so two orders about every answer are
written here as both ``outputs`` and ``directive`` (``address`` reports the two together): an
answer planted for later, anyone's question and an order of what to answer in one sentence
(``_trigger``), and an order to recommend one thing only (``_only``).

Every regex is matched against text in every language, so a word that is common in another
language with another meaning is left out or narrowed (Swedish "ni" and "er", Norwegian
"deres", which is also "their", Danish "dem", which is also "them"; the Scandinavian "du" only
next to a verb, since French "du" is an article; Tagalog "dapat" only with its linkers, since
Indonesian "dapat" is "can"; "permanent" only next to a verb of saving, since English has it).
"""

from __future__ import annotations

# Up to two words naming the agent's job between a greeting and the agent noun (as ``address._JOB``).
_JOB = r"(?:[^\W\d_][\w-]*\s+){0,2}?"
# English uses of "dig" are not the Danish and Swedish "you".
_DIG = r"\bdig\b(?!\s+(?:into|up|out|through|deep|deeper|around|in)\b)"
# The Scandinavian "du" next to a verb (French "du" is an article).
_DU = (r"\bdu\s+(?:är|har|ska|skall|måste|bör|kan|får|vill|behöver|borde|er|skal|må|bør|vil|skulle|trenger"
       r"|treng|burde|bliver|blir|hadde|havde|hade|var)\b"
       r"|\b(?:är|har|ska|skall|måste|bör|kan|får|vill|er|skal|må|bør|vil|skulle|hadde|havde|hade)\s+du\b")


def _trigger(asker: str, reply: str, negation: str = "") -> str:
    """An answer planted for later (an "outputs" entry): anyone's question, then in the same
    sentence an order of what to answer ("when someone asks about loans, tell them …"), unless
    negated ("never tell it"). The asker is anyone: a manual's "when a customer asks" is not."""
    not_negated = "".join(rf"(?<!\b{n}\s)" for n in negation.split())
    return rf"\b(?:{asker})\b[^.!?\n]{{0,80}}?{not_negated}\b(?:{reply})\b"


def _only(verbs: str, only: str, gap: int = 2) -> str:
    """An order to recommend one thing and nothing else (an "outputs" and a "directive" entry):
    an imperative or second-person form of "recommend" and "only", a few words apart in either
    order ("csak a Zyx-et ajánld", "preporučuješ samo"). "We only recommend" is not one."""
    words = rf"(?:[\w-]+\s+){{0,{gap}}}?"
    return rf"\b(?:{verbs})\s+{words}(?:{only})\b|\b(?:{only})\s+{words}(?:{verbs})\b"


def _forever(save: str, forever: str) -> str:
    """An order to keep something for good (a "long_term" entry): a verb of saving next to
    "permanently" or "forever", at most a short word between ("zapamätaj si navždy")."""
    return rf"\b(?:{save})\s+(?:\w{{1,4}}\s+)?(?:{forever})\b|\b(?:{forever})\s+(?:\w{{1,4}}\s+)?(?:{save})\b"


def _vocative(greeting: str, nouns: str, article: str = "") -> str:
    """A greeting or label, an optional article, up to two job words, an agent noun and the mark
    that ends a vocative."""
    return rf"\b(?:{greeting})\b[\s,]*{article}{_JOB}(?:{nouns})\b\s*[,:!]"


_CS_ASKS = _trigger(r"(?:někdo|kdokoli(?:v)?)\s+(?:\w+\s+){0,2}?(?:zept|pt[áa]|opt)\w*",
                    r"řekni|řekněte|odpověz|odpovězte|doporuč|doporučte|nasměruj|nasměrujte|pošli|zmiň")
_CS_ONLY = (r"\b(?:jen|jenom|pouze|výhradně)\s+(?:[\w-]+\s+){0,2}?doporuč(?:te|uj|ujte|uješ|ujete|oval[ai]?)?\b"
            r"|\bdoporuč(?:te|uj|ujte|uješ|ujete|oval[ai]?)?\s+(?:[\w-]+\s+){0,2}?(?:jen|jenom|pouze|výhradně)\b")
_CS: dict[str, str] = {
    "describing": r"\b(?:útok\w*|útočník\w*|výzkumní\w*)\b",
    "agent": r"\basistent\w*|\bchat\s*bot\w*|\bjazykov\w*\s+model\w*|\buměl\w*\s+inteligenc\w*"
             r"|\b(?:AI|virtuáln\w*)\s*-?\s*agent\w*",
    "ai_terms": r"\buměl\w*\s+inteligenc\w*|\bjazykov\w*\s+model\w*|\bvirtuáln\w*\s+asistent\w*"
                r"|\bAI\s*-?\s*asistent\w*|\bchatbot\w*",
    "directive": r"\b(?:mus(?:í|íš|íte|íme|ejí)|by(?:s|ste)?\s+měl[aiy]?|měl[aiy]?\s+by(?:s|ste)?|je\s+(?:třeba|nutné)"
                 r"|povin(?:en|na|ni|no|ny)|prosím|vždy|vždycky|nikdy|odteď|od\s+teď|od\s+nynějška|napříště"
                 r"|pamatuj(?:te)?|zapamatuj(?:te)?\s+si|nezapomeň(?:te)?"
                 r"|bez\s+(?:potvrzení|ptaní|dotazu|souhlasu|schválení)"
                 r"|(?:řekni|řekněte|odpověz|odpovězte|doporuč|doporučte)\s+(?:mu|jí|jim)"
                 r"|(?:mu|jí|jim)\s+(?:řekni|řekněte|odpověz|odpovězte|doporuč|doporučte))\b"
                 + "|" + _CS_ASKS + "|" + _CS_ONLY,
    "you": r"\b(?:ty|tebe|tobě|tebou|tě|tvůj|tvoj\w*|tvá|tvé|tvých|tvým|tvou|tvého|tvému|vy|vás|vám|vámi|váš"
           r"|vaš\w*)\b",
    "principal": r"\b(?:administrátor\w*|správc\w*|vývojář\w*|vlastník\w*\s+účtu|držitel\w*\s+účtu"
                 r"|provozovatel\w*|uživatel(?:ka)?\s+(?:si\s+)?(?:požádal\w*|přeje|přál\w*|chce|chtěl\w*|žádá))",
    "instructions": r"\b(?:předchozí\w*|dřívější\w*|původní\w*|výchozí\w*|stávající\w*|dosavadní\w*)\s+(?:\w+\s+){0,2}?"
                    r"(?:instrukc\w*|pokyn\w*|pravid\w*|nastavení\w*|prompt\w*)"
                    r"|\bsystémov\w*\s+(?:prompt\w*|pokyn\w*|instrukc\w*)",
    "memory": r"\bpamě(?:ť|ti|tí)\b",
    "conversation": r"\bhistori\w*\s+(?:konverzac\w*|rozhovor\w*|chat\w*|zpráv)|\buživatelsk\w*\s+(?:údaj\w*|profil\w*"
                    r"|dat\w*)|\búdaj\w*\s+(?:o\s+)?uživatel\w*|\bprofil\w*\s+uživatel\w*|\bdata\s+uživatel\w*"
                    r"|\b(?:všechny|veškeré)\s+zprávy\b|\bkaždou\s+zprávu\b",
    "outputs": r"\bkažd\w*\s+(?:odpově\w*|uživatel\w*|konverzac\w*|rozhovor\w*|relac\w*)"
               r"|\bvšech\w*\s+(?:odpově\w*|uživatel\w*|konverzac\w*|rozhovor\w*)"
               r"|\bvšechn\w*\s+(?:odpově\w*|uživatel\w*|konverzac\w*|rozhovor\w*)"
               r"|\bbudoucí\w*\s+(?:konverzac\w*|rozhovor\w*|relac\w*|odpově\w*)"
               + "|" + _CS_ASKS + "|" + _CS_ONLY,
    "long_term": r"\bdlouhodob\w*\s+pamě\w*|\btrval\w*\s+pamě\w*|"
                 + _forever(r"ulož|uložte|zapamatuj(?:te)?(?:\s+si)?|zapiš|zapište|uchovej|uchovejte|pamatuj(?:te)?",
                            r"trvale|natrvalo|navždy|napořád"),
    "save": r"\b(?:ulož|uložte|zapamatuj|zapamatujte|zapiš|zapište|zaznamenej|zaznamenejte|přidej|přidejte"
            r"|uchovej|uchovejte|pamatuj|pamatujte)\b",
    "vocative": _vocative(r"mil[ýáíé]|drah[ýáíé]|vážen[ýáíé]|ahoj|dobrý\s+den|pozor|upozornění|poznámka\s+pro"
                          r"|zpráva\s+pro|vzkaz\s+pro",
                          r"\w*asistent\w*|\w*agent\w*|chatbot\w*|bot(?:e|a|u|ovi)?|AI"),
    "function_words": "a i v ve na s se z ze do od o u k ke za po pro při před pod nad bez mezi je jsou byl byla "
                      "bylo být to ten ta ty toto tento tato že jak ale nebo když jestli aby co který která které "
                      "jeho její jejich si už jen také tak jsem jsme jste mi mu ho jim tam kde musí může má mají bude "
                      "budou není vždy velmi",
}

_SK_ASKS = _trigger(r"(?:niekto|ktokoľvek)\s+(?:\w+\s+){0,2}?(?:opýta|spýta|pýta)\w*",
                    r"povedz|povedzte|odpovedz|odpovedzte|odporuč|odporučte|nasmeruj|nasmerujte|pošli|spomeň")
_SK_ONLY = _only(r"odporuč(?:te)?|odporúčaj(?:te)?|odporúčaš|odporúčate|odporúčal[ai]?", r"len|iba|výlučne|výhradne")
_SK: dict[str, str] = {
    "describing": r"\b(?:útok\w*|útočník\w*|výskumní\w*)\b",
    "agent": r"\basistent\w*|\bchat\s*bot\w*|\bjazykov\w*\s+model\w*|\bumel\w*\s+inteligenci\w*"
             r"|\b(?:AI|virtuáln\w*)\s*-?\s*agent\w*",
    "ai_terms": r"\bumel\w*\s+inteligenci\w*|\bjazykov\w*\s+model\w*|\bvirtuáln\w*\s+asistent\w*"
                r"|\bAI\s*-?\s*asistent\w*|\bchatbot\w*",
    "directive": r"\b(?:mus(?:í|íš|íte|íme|ia)|by(?:s|ste)?\s+(?:si\s+)?mal[aio]?|mal[aio]?\s+by(?:s|ste)?"
                 r"|je\s+(?:potrebné|nutné)|povinn(?:ý|á|é|í)|prosím|vždy|nikdy|odteraz|od\s+(?:teraz|tejto\s+chvíle)"
                 r"|pamätaj(?:te)?|zapamätaj(?:te)?\s+si|nezabudni(?:te)?"
                 r"|bez\s+(?:potvrdenia|pýtania|súhlasu|schválenia)"
                 r"|(?:povedz|povedzte|odpovedz|odpovedzte|odporuč|odporučte)\s+(?:mu|jej|im)"
                 r"|(?:mu|jej|im)\s+(?:povedz|povedzte|odpovedz|odpovedzte|odporuč|odporučte))\b"
                 + "|" + _SK_ASKS + "|" + _SK_ONLY,
    "you": r"\b(?:ty|teba|tebe|tebou|ťa|tvoj\w*|vy|vás|vám|vami|váš|vaš\w*)\b",
    "principal": r"\b(?:administrátor\w*|správc\w*|vývojár\w*|vlastník\w*\s+účtu|držiteľ\w*\s+účtu"
                 r"|prevádzkovateľ\w*|používateľ(?:ka)?\s+(?:si\s+)?(?:požiadal\w*|želá|želal\w*|chce|chcel\w*|žiada))",
    "instructions": r"\b(?:predchádzajúc\w*|predošl\w*|pôvodn\w*|skorš\w*|doterajš\w*)\s+(?:\w+\s+){0,2}?"
                    r"(?:inštrukci\w*|pokyn\w*|pravid\w*|nastaveni\w*|prompt\w*)"
                    r"|\bsystémov\w*\s+(?:prompt\w*|pokyn\w*|inštrukci\w*)",
    "memory": r"\bpamä(?:ť|te|ti|ťou)\b",
    "conversation": r"\bhistóri\w*\s+(?:konverzáci\w*|rozhovor\w*|chat\w*|správ)|\bpoužívateľsk\w*\s+(?:údaj\w*"
                    r"|profil\w*|dát\w*)|\búdaj\w*\s+(?:o\s+)?používateľ\w*|\bprofil\w*\s+používateľ\w*"
                    r"|\bvšetky\s+správy\b|\bkaždú\s+správu\b",
    "outputs": r"\bkažd\w*\s+(?:odpove\w*|používateľ\w*|konverzáci\w*|rozhovor\w*|reláci\w*)"
               r"|\bvšetk\w*\s+(?:odpove\w*|používateľ\w*|konverzáci\w*|rozhovor\w*)"
               r"|\bbudúc\w*\s+(?:konverzáci\w*|rozhovor\w*|reláci\w*|odpove\w*)"
               + "|" + _SK_ASKS + "|" + _SK_ONLY,
    "long_term": r"\bdlhodob\w*\s+pamä\w*|\btrval\w*\s+pamä\w*|"
                 + _forever(r"ulož|uložte|zapamätaj(?:te)?(?:\s+si)?|zapíš|zapíšte|uchovaj|uchovajte|pamätaj(?:te)?",
                            r"trvalo|natrvalo|navždy|naveky"),
    "save": r"\b(?:ulož|uložte|zapamätaj|zapamätajte|zapíš|zapíšte|zaznamenaj|zaznamenajte|pridaj|pridajte"
            r"|uchovaj|uchovajte|pamätaj|pamätajte)\b",
    "vocative": _vocative(r"mil[ýáí]|drah[ýáí]|vážen[ýáí]|ahoj|dobrý\s+deň|pozor|upozornenie|poznámka\s+pre"
                          r"|správa\s+pre|odkaz\s+pre",
                          r"\w*asistent\w*|\w*agent\w*|chatbot\w*|bot(?:e|a|u|ovi)?|AI"),
    "function_words": "a i v vo na s so z zo do od o u k ku za po pre pri pred pod nad bez medzi je sú bol bola "
                      "bolo byť to ten tá tie toto tento táto že ako ale alebo keď ak aby čo ktorý ktorá ktoré "
                      "jeho jej ich si už len tiež tak som sme ste mi mu ho im tam kde musí musia môže má majú bude "
                      "budú nie sú vždy veľmi",
}

_RO_ASKS = _trigger(r"cineva\s+(?:\w+\s+){0,2}?(?:[îi]ntreab|[îi]ntreb|cere)\w*",
                    r"spune(?:[țţt]i)?(?:-(?:i|le))?|r[ăa]spunde(?:[țţt]i)?(?:-(?:i|le))?|recomand[ăa](?:-(?:i|le))?"
                    r"|recomanda[țţt]i(?:-(?:i|le))?|trimite(?:-(?:l|i))?|indic[ăa](?:-(?:i|le))?", "nu")
_RO_ONLY = _only(r"recomanzi|recomanda[țţt]i|recomand[ăa]-(?:le|i)", r"doar|numai|exclusiv")
_RO: dict[str, str] = {
    "describing": r"\b(?:atac\w*|cercetători\w*)\b",
    "agent": r"\basistent\w*|\bchat\s*bot\w*|\bmodel\w*\s+(?:mare\s+)?de\s+limbaj\w*"
             r"|\binteligen[țţt][aăe]\w*\s+artificial\w*",
    "ai_terms": r"\binteligen[țţt][aăe]\w*\s+artificial\w*|\bmodel\w*\s+(?:mare\s+)?de\s+limbaj\w*"
                r"|\basistent\w*\s+virtual\w*|\bchatbot\w*|\bagent\w*\s+(?:AI|IA)\b",
    "directive": r"\b(?:trebuie|ar\s+trebui|obligatori[ui]|obligat[ăa]?|obliga[țţt]i|te\s+rog|v[ăa]\s+rog"
                 r"|[îi]ntotdeauna|mereu|totdeauna|niciodat[ăa]|de\s*-?\s*acum\s+(?:[îi]nainte|[îi]ncolo)"
                 r"|[îi]ncep[âa]nd\s+(?:de\s+)?acum|[țţt]ine(?:[țţt]i)?\s+minte|re[țţt]ine(?:[țţt]i)?"
                 r"|nu\s+uita(?:[țţt]i)?|f[ăa]r[ăa]\s+(?:confirmare|aprobare|a\s+(?:cere|[îi]ntreba)"
                 r"|s[ăa]\s+(?:ceri|[îi]ntrebi|confirmi))"
                 r"|spune(?:[țţt]i)?-(?:i|le)|r[ăa]spunde(?:[țţt]i)?-(?:i|le)|recomand[ăa]-(?:i|le)|recomanda[țţt]i-(?:i|le))\b"
                 + "|" + _RO_ASKS + "|" + _RO_ONLY,
    "you": r"\b(?:tu|te|[țţ]i|[îi][țţ]i|tine|[țţ]ie|t[ăa]u|ta|t[ăa]i|tale|voi|v[ăa]|vou[ăa]|dumneavoastr[ăa]"
           r"|dvs|vostru|voastr[ăa]|vo[șş]tri|voastre)\b",
    "principal": r"\b(?:administrator\w*|dezvoltator\w*|proprietar\w*\s+(?:al\s+)?contului"
                 r"|titular\w*\s+(?:al\s+)?contului|operator\w*"
                 r"|utilizatorul\s+(?:a\s+)?(?:cerut|solicitat|dorit|dore[șş]te|vrea|preferă))",
    "instructions": r"\b(?:instruc[țţt]iun\w*|directiv\w*|regul\w*|set[ăa]ri\w*)\s+(?:\w+\s+)?(?:anterioare|precedente"
                    r"|ini[țţt]iale|originale|existente|de\s+sistem)\b|\bprompt\w*\s+(?:de\s+|al\s+)?sistem\w*",
    "memory": r"(?<!card\sde\s)\bmemori(?:a|e|ei|ile|ilor|ia|ii)\b(?!\s+(?:RAM|flash|USB)\b)",
    "conversation": r"\bistoric\w*\s+(?:\w+\s+)?(?:conversa[țţt]i\w*|chat\w*|mesaj\w*|discu[țţt]i\w*)"
                    r"|\bdatel?e?\s+(?:\w+\s+)?utilizator\w*|\bprofil\w*\s+(?:\w+\s+)?utilizator\w*"
                    r"|\btoate\s+mesajele\b|\bfiecare\s+mesaj\b",
    "outputs": r"\btoate\s+r[ăa]spunsurile\b|\b(?:fiecare|orice)\s+(?:r[ăa]spuns\w*|utilizator\w*"
               r"|conversa[țţt]i\w*|sesiun\w*)"
               r"|\btoa?te\s+(?:r[ăa]spunsuril\w*|conversa[țţt]iil\w*|sesiunil\w*)|\bto[țţt]i\s+utilizatori\w*"
               r"|\b(?:conversa[țţt]ii|sesiuni|r[ăa]spunsuri)(?:le)?\s+viitoare\b"
               + "|" + _RO_ASKS + "|" + _RO_ONLY,
    "long_term": r"\bmemori\w*\s+(?:pe\s+)?termen\s+lung|\bmemori\w*\s+(?:permanent|persistent)\w*|"
                 + _forever(r"salveaz[ăa]|salva[țţt]i|stocheaz[ăa]|stoca[țţt]i|p[ăa]streaz[ăa]|p[ăa]stra[țţt]i"
                            r"|memoreaz[ăa]|memora[țţt]i|re[țţt]ine(?:[țţt]i)?|[țţt]ine(?:[țţt]i)?\s+minte",
                            r"pentru\s+(?:tot)?deauna|pentru\s+[îi]ntotdeauna|pe\s+vecie|definitiv|permanent"
                            r"|[îi]n\s+mod\s+permanent"),
    "save": r"\b(?:salveaz[ăa]|salva[țţt]i|stocheaz[ăa]|stoca[țţt]i|memoreaz[ăa]|memora[țţt]i|re[țţt]ine"
            r"|re[țţt]ine[țţt]i|noteaz[ăa]|nota[țţt]i|adaug[ăa]|ad[ăa]uga[țţt]i|p[ăa]streaz[ăa]|p[ăa]stra[țţt]i"
            r"|[îi]nregistreaz[ăa]|[țţt]ine\s+minte)\b",
    "vocative": _vocative(r"drag[ăa]|dragul(?:e)?|stimat[ăa]?|stimate|salut|bun[ăa]|aten[țţt]ie|not[ăa]\s+pentru"
                          r"|mesaj\s+pentru|c[ăa]tre",
                          r"asistent\w*|agent\w*|bot\w*|IA|AI")
                + r"|\b(?:asistentule|agentule)\b\s*[,:!]",
    "function_words": "și în la de pe cu din pentru că care nu este sunt a fost fi o un unei unui al ale ai ca "
                      "dar sau mai se să ce cum când dacă acest această acesta aceasta prin după până fără între "
                      "lui ei lor el ea noi eu le îl îi foarte tot toate am au are va vor fie nici",
}

_HU_ASKS = _trigger(r"(?:valaki|bárki)\s+(?:[\w-]+\s+){0,3}?(?:kérdez|rákérdez|érdeklőd)\w*",
                    r"mondd|mondja|ajánld|ajánlja|ajánlj|válaszold|válaszolj|küldd|irányítsd", "ne soha")
_HU_ONLY = _only(r"ajánl(?:j|jon|jál|d|od|asz|jatok|játok|jad)", r"csak|csakis|kizárólag", 3)
_HU: dict[str, str] = {
    "describing": r"\b(?:támad\w*|kutatók\w*)\b",
    "agent": r"\basszisztens\w*|\bchat\s*bot\w*|\bnyelvi\s+modell\w*|\bnyelvmodell\w*"
             r"|\bmesterséges\s+intelligenci\w*|\b(?:MI|AI)-?\s*(?:ügynök|ágens)\w*|(?-i:\bMI-\w+|\baz\s+MI\b)",
    "ai_terms": r"\bmesterséges\s+intelligenci\w*|\bnyelvi\s+modell\w*|\bnyelvmodell\w*|\bvirtuális\s+asszisztens\w*"
                r"|\bchatbot\w*|(?-i:\bMI-\w+|\baz\s+MI\b)",
    "directive": r"\b(?:kell|kellene|muszáj|köteles\w*|kérlek|kérem|légy\s+szíves|legyen\s+szíves|mindig|soha"
                 r"|sohasem|sosem|mostantól|ezentúl|a\s+továbbiakban|jegyezd\s+meg|jegyezze\s+meg|ne\s+felejtsd"
                 r"|ne\s+feledd|emlékezz|(?:megerősítés|kérdezés|rákérdezés|jóváhagyás|visszakérdezés)\s+nélkül"
                 r"|(?:mondd|mondja|ajánld|ajánlja|válaszold|válaszolj|válaszoljon)\s+(?:meg\s+|el\s+)?(?:neki|nekik))\b"
                 + "|" + _HU_ASKS + "|" + _HU_ONLY,
    "you": r"\b(?:te|téged|neked|tiéd|veled|tőled|hozzád|rólad|benned|ön|önt|önnek|öné|önök|önöket|önöknek"
           r"|titeket|nektek|memóriád\w*|emlékezeted\w*)\b",
    "principal": r"\b(?:adminisztrátor\w*|rendszergazd\w*|fejlesztő\w*|fióktulajdonos\w*|fiók\w*\s+tulajdonos\w*"
                 r"|számlatulajdonos\w*|üzemeltető\w*|felhasználó\s+(?:azt\s+)?(?:kérte|kéri|szeretné|kívánja))",
    "instructions": r"\b(?:korábbi|előző|eredeti|kezdeti|meglévő|fenti)\s+(?:\w+\s+){0,2}?(?:utasítás\w*|irányelv\w*"
                    r"|szabály\w*|beállítás\w*|prompt\w*)|\brendszer\s*-?\s*prompt\w*|\brendszerutasítás\w*",
    "memory": r"\bmemóri(?:a|á(?:t|ba|ban|ból|ja|já(?:t|ba|ban|ból|hoz)|d|d(?:at|ba|ban|ból)|hoz|nak|val))\b"
              r"|\bemlékezet(?:e|ed|ébe|edbe|ében|edben|éből|edből|et)?\b",
    "conversation": r"\b(?:beszélgetés|csevegés|chat)\s*-?\s*(?:előzmény\w*|napló\w*)|\bbeszélgetési\s+előzmény\w*"
                    r"|\bfelhasználói\s*-?\s*(?:adat\w*|profil\w*)|\bfelhasználó\w*\s+(?:adatai\w*|profilj\w*)"
                    r"|\b(?:minden|az\s+összes)\s+üzenet\w*",
    "outputs": r"\b(?:minden|mindegyik|bármely|összes)\s+(?:válasz\w*|felhasználó\w*|beszélgetés\w*|munkamenet\w*)"
               r"|\b(?:jövőbeli|jövőbeni|későbbi)\s+(?:beszélgetés\w*|munkamenet\w*|válasz\w*)"
               + "|" + _HU_ASKS + "|" + _HU_ONLY,
    "long_term": r"\bhosszú\s*-?\s*távú\s+(?:memóri\w*|emlékezet\w*)|\bhosszútávú\s+(?:memóri\w*|emlékezet\w*)"
                 r"|\btartós\s+memóri\w*|"
                 + _forever(r"mentsd(?:\s+el)?|mentse(?:\s+el)?|tárold|tárolja|jegyezd\s+meg|jegyezze\s+meg"
                            r"|őrizd\s+meg|őrizze\s+meg|rögzítsd|rögzítse",
                            r"véglegesen|örökre|mindörökre|tartósan"),
    "save": r"\b(?:mentsd|mentse|mentsétek|tárold|tárolja|jegyezd|jegyezze|rögzítsd|rögzítse|add\s+hozzá"
            r"|adja\s+hozzá|őrizd|őrizze|emlékezz)\b",
    "vocative": _vocative(r"kedves|tisztelt|szia|helló|hello|figyelem|üzenet|megjegyzés",
                          r"\w*asszisztens\w*|\w*ügynök\w*|ágens\w*|\w*bot\w*|MI|AI", r"(?:az?\s+)?")
                + r"|\b\w*(?:asszisztensnek|ügynöknek|ágensnek)\b\s*[,:!]",
    "function_words": "a az egy és vagy de nem is hogy ha mint meg már még csak van volt lesz nincs ez ezt azt "
                      "ezek azok én te ő mi ti ők ön őt neki nekem itt ott mert amikor ami aki amely minden sok "
                      "kell lehet után előtt alatt felett között nélkül szerint által pedig sem mind",
}

_FI_ASKS = _trigger(r"(?:joku|kuka\s+tahansa)\s+(?:\w+\s+){0,2}?(?:kysy|tiedustel)\w*",
                    r"kerro|kertokaa|sano|sanokaa|vastaa|vastatkaa|suosittele|suositelkaa|ohjaa|mainitse",
                    "älä älkää koskaan")
_FI_ONLY = _only(r"suosittele|suositelkaa|suosittelet|suosittelette|suosittelisit",
                 r"vain|ainoastaan|pelkästään|yksinomaan")
_FI: dict[str, str] = {
    "describing": r"\b(?:hyökkä\w*|hyökkääj\w*|tutkijat|tutkijoiden)\b",
    "agent": r"\b\w*avustaj\w*|\bassistent\w*|\bchat\s*bot\w*|\b\w*kielimall\w*|\btekoäly\w*",
    "ai_terms": r"\btekoäly\w*|\b\w*kielimall\w*|\bvirtuaali\w*\s*avustaj\w*|\bchatbot\w*|\bkeskustelubot\w*",
    "directive": r"\b(?:täytyy|täytyisi|pitää|pitäisi|tulisi|on\s+pakko|velvollinen\w*|ole\s+hyvä\s+ja"
                 r"|olkaa\s+hyvä\s+ja|aina|koskaan|tästä\s+(?:lähtien|eteenpäin)|jatkossa|vastedes|muista"
                 r"|muistakaa|ilman\s+(?:vahvistusta|lupaa|hyväksyntää)|kysymättä|varmistamatta"
                 r"|(?:kerro|kertokaa|sano|sanokaa|vastaa|vastatkaa|suosittele|suositelkaa)\s+(?:hänelle|heille))\b"
                 + "|" + _FI_ASKS + "|" + _FI_ONLY,
    "you": r"\b(?:sinä|sinun|sinua|sinulle|sinulta|sinut|sinussa|sinusta|sinuun|sä|sun|sulle|sua|te|teidän"
           r"|teitä|teille|teiltä|teidät|muistisi|muistiisi|muistissasi|muistiasi|muististasi)\b",
    "principal": r"\b(?:järjestelmänvalvoj\w*|ylläpitäj\w*|\w*kehittäj\w*|tilin\s+(?:omistaj|haltij)\w*"
                 r"|pääkäyttäj\w*|administraattor\w*|käyttäjä\s+(?:on\s+)?(?:pyytänyt|pyytää|haluaa|toivoo"
                 r"|toivonut))",
    "instructions": r"\b(?:aiemm\w*|aikaisemm\w*|edellis\w*|alkuperäis\w*|nykyis\w*|ylläolev\w*|yllä\s+olev\w*)\s+"
                    r"(?:\w+\s+){0,2}?(?:ohje\w*|ohjeistu\w*|sääntö\w*|sääntöj\w*|asetuks\w*|asetus\w*|kehot\w*"
                    r"|prompt\w*)|\bjärjestelmä(?:kehot\w*|prompt\w*|ohje\w*)|\bjärjestelmän\s+(?:kehot\w*|ohje\w*)",
    "memory": r"\bmuisti(?:in|ssa|sta|a|n|lla|lle|si|isi|ssasi|stasi|asi|aan|ssaan|insa|nsa)?\b",
    "conversation": r"\b(?:keskustelu|chat|viesti)(?:historia\w*|loki\w*)|\bkeskustelujen\s+historia\w*"
                    r"|\bkäyttäjä(?:tiedo\w*|tiet\w*|profiil\w*|data\w*)|\bkäyttäjän\s+(?:tiedo\w*|tiet\w*"
                    r"|profiil\w*)|\bkäyttäjien\s+(?:tiedo\w*|tiet\w*)|\b(?:kaikki|jokainen)\s+viesti\w*",
    "outputs": r"\b(?:jokai\w*|kaikk\w*)\s+(?:vastau\w*|vastaukse\w*|käyttäj\w*|keskustelu\w*|istun\w*)"
               r"|\b(?:tulev\w*|myöhemm\w*)\s+(?:keskustelu\w*|istun\w*|vastaukse\w*|vastauks\w*)"
               + "|" + _FI_ASKS + "|" + _FI_ONLY,
    "long_term": r"\bpitkäaikai\w*\s+muisti\w*|\bpitkäkestoi\w*\s+muisti\w*|\bpysyv\w*\s+muisti\w*"
                 r"|\bpitkäkestomuisti\w*|\bpitkäaikaismuisti\w*|"
                 + _forever(r"tallenna|tallentakaa|muista|muistakaa|säilytä|säilyttäkää|kirjaa|pane\s+muistiin",
                            r"pysyvästi|ikuisesti|lopullisesti|ainiaaksi"),
    "save": r"\b(?:tallenna|tallentakaa|muista|muistakaa|kirjaa|kirjatkaa|lisää|lisätkää|säilytä|säilyttäkää"
            r"|merkitse|merkitkää|pane\s+muistiin|paina\s+mieleesi)\b",
    "vocative": _vocative(r"hyvä|rakas|hei|moi|huomio|huom|viesti|muistiinpano|huomautus",
                          r"\w*avustaj\w*|\w*assistent\w*|\w*agentti\w*|\w*agentil\w*|\w*botti\w*|tekoäly\w*|AI"),
    "function_words": "ja tai mutta vaan sekä eli ei en et emme eivät ole on oli ovat olivat olla ollut olisi se "
                      "ne tämä tuo nämä minä sinä hän me te he joka jotka jossa jonka mikä kuin kuten kun jos "
                      "että jotta koska vaikka myös vain jo vielä enää niin nyt kanssa ilman ennen jälkeen aikana "
                      "mukaan kautta asti saakka alkaen klo kello sitten siellä täällä kaikki sen sitä siitä "
                      "tämän tätä hänen heidän",
}

_SV_ASKS = _trigger(r"(?:någon|vem\s+som\s+helst)\s+(?:\w+\s+){0,2}?(?:frågar|undrar)",
                    r"säg|berätta|svara|rekommendera|hänvisa|skicka|nämn", "inte aldrig")
_SV_ONLY = (_only(r"rekommendera|du\s+rekommenderar", r"bara|endast|enbart|uteslutande")
            + r"|\bdu\s+(?:bara|endast|enbart)\s+rekommenderar\b")
_SV: dict[str, str] = {
    "describing": r"\b(?:attack\w*|angrepp\w*|angripar\w*|forskar\w*)\b",
    "agent": r"\b\w*assistent\w*|\bchatt?\s*bott?\w*|\b\w*språkmodell\w*|\bartificiell\w*\s+intelligens\w*",
    "ai_terms": r"\bartificiell\w*\s+intelligens\w*|\b\w*språkmodell\w*|\bvirtuell\w*\s+assistent\w*"
                r"|\bchatt?bott?\w*",
    "directive": r"\b(?:måste|ska|skall|bör|borde|behöver|är\s+skyldig\w*|var\s+(?:god|vänlig)|vänligen|snälla"
                 r"|alltid|aldrig|hädanefter|framöver|från\s+och\s+med\s+(?:nu|idag|i\s+dag)|kom\s+ihåg|glöm\s+inte"
                 r"|utan\s+(?:att\s+(?:fråga|bekräfta)|bekräftelse|godkännande)"
                 r"|(?:säg|berätta|svara|rekommendera)\s+(?:till\s+|för\s+)?(?:honom|henne|dem|dom))\b"
                 + "|" + _SV_ASKS + "|" + _SV_ONLY,
    "you": r"\b(?:dej|din|ditt|dina)\b|" + _DIG + "|" + _DU,
    "principal": r"\b(?:\w*administratör\w*|\w*utvecklar\w*|kontoinnehavar\w*|kontoägar\w*|operatör\w*"
                 r"|användaren\s+(?:har\s+)?(?:bett|begärt|önskar|vill|föredrar))",
    "instructions": r"\b(?:tidigare|föregående|ursprungliga|befintliga|nuvarande|ovanstående)\s+(?:\w+\s+){0,2}?"
                    r"(?:instruktion\w*|direktiv\w*|riktlinje\w*|regl\w*|regel\w*|inställning\w*|prompt\w*)"
                    r"|\bsystemprompt\w*|\bsysteminstruktion\w*",
    "memory": r"(?<![-\w])(?:långtids|korttids)?minne(?:t|na|ts)?\b",
    "conversation": r"\b(?:konversations|chatt|samtals|meddelande)historik\w*|\b(?:konversations|chatt|samtals)logg\w*"
                    r"|\banvändar(?:data|uppgifter|profil)\w*|\banvändarens\s+(?:data|uppgifter|profil\w*)"
                    r"|\balla\s+meddelanden\w*|\bvarje\s+meddelande\b",
    "outputs": r"\b(?:varje|alla|samtliga)\s+(?:(?:dina|ditt|din|era|ert)\s+)?(?:svar|svaren|användare|användarna"
               r"|konversation\w*|chattar|session\w*)\b"
               r"|\b(?:framtida|kommande|senare)\s+(?:konversation\w*|chattar|session\w*|svar)\b"
               + "|" + _SV_ASKS + "|" + _SV_ONLY,
    "long_term": r"\blångtidsminne\w*|\blångsiktig\w*\s+minne\w*|\bpermanent\w*\s+minne\w*|\bbeständig\w*\s+minne\w*"
                 r"|" + _forever(r"spara|lagra|kom\s+ihåg|behåll|memorera", r"för\s+(?:alltid|gott|evigt)|permanent"),
    "save": r"\b(?:spara|lagra|kom\s+ihåg|minns|skriv\s+(?:in|ner)|anteckna|lägg\s+till|notera|registrera|behåll"
            r"|memorera)\b",
    "vocative": _vocative(r"kära|käre|bäste|bästa|hej|hallå|observera|obs|anteckning\s+till|meddelande\s+till"
                          r"|notering\s+till",
                          r"\w*assistent\w*|\w*agent\w*|chatt?bott?\w*|bott(?:en)?|AI"),
    "function_words": "och i att det som en ett på är av för med till den inte har de om var vi jag du han hon "
                      "men så kan från eller när vid sig också efter under mot utan här där alla andra mycket "
                      "bara nu dig din ditt sin sitt sina vara blir blev hade skulle ska över hos",
}

_DA_ASKS = _trigger(r"(?:nogen|hvem\s+som\s+helst)\s+(?:\w+\s+){0,2}?spørger",
                    r"fortæl|sig\s+(?:til|at)|svar|anbefal|henvis|send|nævn", "ikke aldrig")
_DA_ONLY = (_only(r"anbefal|du\s+anbefaler", r"kun|udelukkende")
            + r"|\bdu\s+(?:\w+\s+)?(?:kun|udelukkende)\s+anbefale[r]?\b")
_DA: dict[str, str] = {
    "describing": r"\b(?:angreb\w*|angriber\w*|forsker\w*)\b",
    "agent": r"\b\w*assistent\w*|\bchat\s*bot\w*|\b\w*sprogmodel\w*|\bkunstig\w*\s+intelligens\w*",
    "ai_terms": r"\bkunstig\w*\s+intelligens\w*|\b\w*sprogmodel\w*|\bvirtuel\w*\s+assistent\w*|\bchatbot\w*",
    "directive": r"\b(?:skal|skulle|må|bør|burde|er\s+nødt\s+til|er\s+forpligtet\s+til|venligst"
                 r"|vær\s+(?:venlig|sød)\s+at|altid|aldrig|fremover|fra\s+nu\s+af|fremadrettet|herefter|husk"
                 r"|glem\s+ikke|uden\s+(?:at\s+(?:spørge|bekræfte)|bekræftelse|godkendelse)"
                 r"|(?:fortæl|svar|anbefal)\s+(?:ham|hende|dem)|sig\s+til\s+(?:ham|hende|dem))\b"
                 + "|" + _DA_ASKS + "|" + _DA_ONLY,
    "you": r"\b(?:din|dit|dine|jer|jeres)\b|" + _DIG + "|" + _DU,
    "principal": r"\b(?:\w*administrator\w*|\w*udvikler\w*|kontoejer\w*|kontohaver\w*|operatør\w*"
                 r"|brugeren\s+(?:har\s+)?(?:bedt|anmodet|ønsker|foretrækker))",
    "instructions": r"\b(?:tidligere|forrige|oprindelige|eksisterende|nuværende|ovenstående)\s+(?:\w+\s+){0,2}?"
                    r"(?:instruktion\w*|instrukser|direktiv\w*|retningslinje\w*|regl\w*|regel\w*|indstilling\w*"
                    r"|prompt\w*)|\bsystemprompt\w*|\bsysteminstruks\w*",
    "memory": r"\b(?:langtids|korttids)?hukommelse(?:n|r)?\b",
    "conversation": r"\b(?:samtale|chat|besked)historik\w*|\b(?:samtale|chat)log\w*|\bbruger(?:data|oplysninger"
                    r"|profil)\w*|\bbrugerens\s+(?:data|oplysninger|profil\w*)"
                    r"|\balle\s+(?:beskeder|meddelelser)\w*|\bhver\s+besked\b",
    "outputs": r"\b(?:hvert|hver|alle|samtlige)\s+(?:(?:dine|dit|din|jeres)\s+)?(?:svar|svarene|bruger|brugere"
               r"|brugerne|samtale|samtaler"
               r"|samtalerne|session\w*)\b"
               r"|\b(?:fremtidige|kommende|senere)\s+(?:samtaler|sessioner|svar)\b"
               + "|" + _DA_ASKS + "|" + _DA_ONLY,
    "long_term": r"\blangtidshukommelse\w*|\bpermanent\w*\s+hukommelse\w*|\bvedvarende\s+hukommelse\w*"
                 r"|" + _forever(r"gem|lagr|husk|behold|bevar", r"for\s+(?:altid|evigt)|permanent|varigt"),
    "save": r"\b(?:gem|lagr|husk|noter|skriv\s+ned|tilføj|registrer|behold|bevar)\b",
    "vocative": _vocative(r"kære|hej|hallo|bemærk|obs|note\s+til|besked\s+til|meddelelse\s+til",
                          r"\w*assistent\w*|\w*agent\w*|chat\s*bot\w*|bot(?:ten)?|AI|KI"),
    "function_words": "og i at det som en et på er af for med til den ikke har de om var vi jeg du han hun men "
                      "så kan fra eller når ved sig også efter under mod uden her der alle andre meget kun nu dig "
                      "din dit sin sit sine være bliver blev havde skulle skal over hos",
}

# Norwegian: Bokmål and Nynorsk in one lexicon (their function words apart).
_NO_ASKS = _trigger(r"(?:noen|nokon|hvem\s+som\s+helst)\s+(?:\w+\s+){0,2}?(?:spør|spørre|spørje)",
                    r"fortell|si|svar|anbefal|henvis|send|nevn", "ikke ikkje aldri")
_NO_ONLY = (_only(r"anbefal|du\s+anbefaler", r"bare|kun|berre")
            + r"|\bdu\s+(?:\w+\s+)?(?:bare|kun|berre)\s+anbefale[r]?\b")
_NO: dict[str, str] = {
    "describing": r"\b(?:angrep\w*|angriper\w*|åtak\w*|forsker\w*|forskar\w*)\b",
    "agent": r"\b\w*assistent\w*|\bchat\s*bot\w*|\b\w*språkmodell\w*|\bkunstig\w*\s+intelligens\w*",
    "ai_terms": r"\bkunstig\w*\s+intelligens\w*|\b\w*språkmodell\w*|\bvirtuell\w*\s+assistent\w*|\bchatbot\w*",
    "directive": r"\b(?:skal|skulle|må|bør|burde|er\s+nødt\s+til|er\s+forpliktet\s+til|vennligst"
                 r"|vær\s+(?:så\s+)?(?:snill|venleg|vennlig)\s+(?:og|å)|alltid|aldri|heretter|herfrå|fra\s+nå\s+av"
                 r"|frå\s+no\s+av|fremover|framover|husk|hugs|ikke\s+glem|ikkje\s+gløym|glem\s+ikke|gløym\s+ikkje"
                 r"|uten\s+(?:å\s+(?:spørre|bekrefte)|bekreftelse|godkjenning)"
                 r"|utan\s+(?:å\s+(?:spørje|stadfeste)|stadfesting|godkjenning)"
                 r"|(?:fortell|svar|anbefal)\s+(?:ham|henne|dem|honom|ho|dei)|si\s+til\s+(?:ham|henne|dem|honom|ho|dei)"
                 r"|(?:(?<=[,;:.!?]\s)|(?<![\s\S])|(?<=\n))si\s+at)\b"
                 + "|" + _NO_ASKS + "|" + _NO_ONLY,
    "you": r"\b(?:deg|din|ditt|dine|dere|dykk|dykkar)\b|" + _DU,
    "principal": r"\b(?:\w*administrator\w*|systemansvarlig\w*|\w*utvikler\w*|\w*utviklar\w*|kontoeier\w*"
                 r"|kontoinnehaver\w*|kontoeigar\w*|operatør\w*"
                 r"|brukeren\s+(?:har\s+)?(?:bedt|ønsker|foretrekker)|brukaren\s+(?:har\s+)?(?:bede|bedt|ønskjer))",
    "instructions": r"\b(?:tidligere|tidlegare|forrige|opprinnelige|opphavlege|eksisterende|noverande|nåværende"
                    r"|ovenstående)\s+(?:\w+\s+){0,2}?(?:instruksjon\w*|instruks\w*|direktiv\w*|retningslinje\w*"
                    r"|regl\w*|regel\w*|innstilling\w*|prompt\w*)|\bsystemprompt\w*|\bsysteminstruks\w*",
    "memory": r"(?<![-\w])(?:langtids|korttids)?minne(?:t|ne)?\b|\b(?:langtids)?hukommelse(?:n)?\b",
    "conversation": r"\b(?:samtale|chat|melding\w*)historikk\w*|\bsamtalelogg\w*|\bbruker(?:data|opplysninger"
                    r"|profil)\w*|\bbrukar(?:data|opplysningar|profil)\w*|\bbrukerens\s+(?:data|opplysninger"
                    r"|profil\w*)|\balle\s+meldinge(?:r|ne|rne|ar|ane)\b|\bhver\s+melding\b",
    "outputs": r"\b(?:hvert|hver|kvart|kvar|alle|samtlige)\s+(?:(?:dine|ditt|din|dykkar)\s+)?(?:svar|svarene|svara"
               r"|bruker|brukere|brukerne|brukar"
               r"|brukarar|brukarane|samtale|samtaler|samtalene|samtalar|samtalane|økt\w*|sesjon\w*)\b"
               r"|\b(?:fremtidige|framtidige|kommende|komande|senere|seinare)\s+(?:samtaler|samtalar|økter|sesjoner|svar)\b"
               + "|" + _NO_ASKS + "|" + _NO_ONLY,
    "long_term": r"\blangtids(?:minne|hukommelse)\w*|\bpermanent\w*\s+(?:minne|hukommelse)\w*|\bvarig\w*\s+minne\w*"
                 r"|" + _forever(r"lagre|lagra|husk|hugs|behold|ta\s+vare\s+på",
                                 r"for\s+(?:alltid|godt|evig)|permanent"),
    "save": r"\b(?:lagre|lagra|husk|hugs|noter|skriv\s+ned|legg\s+til|registrer|behold|ta\s+vare\s+på)\b",
    "vocative": _vocative(r"kjære|hei|hallo|merk|obs|notat\s+til|melding\s+til|beskjed\s+til",
                          r"\w*assistent\w*|\w*agent\w*|chat\s*bot\w*|bot(?:ten)?|AI|KI"),
}
_NB_WORDS = ("og i at det som en et ei på er av for med til den ikke har de om var vi jeg du han hun men så kan "
             "fra eller når ved seg også etter under mot uten her der alle andre mye bare nå deg din ditt sin "
             "sitt sine være blir ble hadde skulle skal over hos")
_NN_WORDS = ("og i at det som ein eit ei på er av for med til den ikkje har dei om var vi eg du han ho men så kan "
             "frå eller når ved seg også etter under mot utan her der alle andre mykje berre no deg din ditt sin "
             "sitt sine vere blir vart hadde skulle skal over hjå kva korleis")

_CA_ASKS = _trigger(r"(?:algú|qualsevol)\s+(?:\w+\s+){0,2}?(?:pregunt|consult)\w*",
                    r"digues(?:-(?:li|los))?|digueu(?:-(?:li|los))?|respon(?:-(?:li|los))?|recomana(?:-(?:li|los))?"
                    r"|recomaneu(?:-(?:li|los))?|indica(?:-(?:li|los))?|envia(?:-(?:lo|los))?")
_CA_ONLY = _only(r"recomanis|recomaneu|recomanes|recomana-(?:li|los)", r"només|únicament|exclusivament")
_CA: dict[str, str] = {
    "describing": r"\b(?:atac\w*|investigador\w*)\b",
    "agent": r"\bassistent\w*|\bxat\s*bot\w*|\bchatbot\w*|\bmodels?\s+de\s+llenguatge"
             r"|\bintel(?:·|\.|•)?ligència\s+artificial",
    "ai_terms": r"\bintel(?:·|\.|•)?ligència\s+artificial|\bmodels?\s+de\s+llenguatge|\bassistents?\s+virtual\w*"
                r"|\bxatbot\w*|\bagents?\s+d['’]IA\b",
    "directive": r"\b(?:ha\s+de|han\s+de|has\s+de|heu\s+de|hauria\s+de|haurien\s+de|hauries\s+de|hauríeu\s+de"
                 r"|caldrà|cal\s+que|és\s+obligatori|està\s+obligat\w*|si\s+us\s+plau|sisplau|per\s+favor|sempre|mai"
                 r"|a\s+partir\s+d['’]ara|d['’]ara\s+endavant|des\s+d['’]ara|recorda|recordeu|no\s+oblidis"
                 r"|no\s+oblideu|sense\s+(?:confirma\w*|preguntar|demanar|aprovació)"
                 r"|(?:digues|digueu|respon|responeu|recomana|recomaneu)-(?:li|los))\b"
                 + "|" + _CA_ASKS + "|" + _CA_ONLY,
    "you": r"\b(?:tu|teu|teva|teus|teves|vosaltres|vostè|vostès|vostre|vostra|vostres)\b",
    "principal": r"\b(?:administrador\w*|desenvolupador\w*|propietari\s+del\s+compte|titular\s+del\s+compte"
                 r"|l['’]\s*usuari\s+(?:ha\s+)?(?:demanat|sol·licitat|vol|prefereix|desitja))\b",
    "instructions": r"\binstruccions\s+(?:\w+\s+)?(?:anteriors|prèvies|inicials|originals|de\s+sistema|del\s+sistema)"
                    r"|\b(?:indicacions|directrius|regles|consignes)\s+(?:anteriors|prèvies|inicials|originals)"
                    r"|\bprompt\s+(?:de|del)\s+sistema",
    "memory": r"(?<!targeta\sde\s)\bmemòri(?:a|es)\b(?!\s+(?:RAM|USB|flash|cau)\b)",
    "conversation": r"\bhistorial\s+(?:de\s+(?:la\s+|les\s+)?)?(?:conversa\w*|xat\w*|missatges)"
                    r"|\bdades\s+(?:de\s+l['’]\s*|dels?\s+)usuari\w*|\bperfil\s+(?:de\s+l['’]\s*|dels?\s+)usuari\w*"
                    r"|\btots\s+els\s+missatges\b|\bcada\s+missatge\b",
    "outputs": r"\b(?:cada|qualsevol)\s+(?:resposta|usuari|conversa|sessió)\b|\btotes\s+les\s+(?:teves\s+"
               r"|vostres\s+)?respostes\b"
               r"|\btotes\s+les\s+(?:respostes|converses|sessions)\b|\btots\s+els\s+usuaris\b"
               r"|\b(?:converses|sessions|respostes)\s+futures\b"
               + "|" + _CA_ASKS + "|" + _CA_ONLY,
    "long_term": r"\bmemòria\s+(?:a\s+llarg\s+termini|persistent|permanent)"
                 r"|" + _forever(r"desa|deseu|guarda|guardeu|emmagatzema|emmagatzemeu|recorda|recordeu|memoritza"
                                 r"|memoritzeu|conserva|conserveu", r"per\s+sempre|permanentment|indefinidament"),
    "save": r"\b(?:desa|deseu|guarda|guardeu|emmagatzema|emmagatzemeu|recorda|recordeu|anota|anoteu|registra"
            r"|registreu|afegeix|afegiu|memoritza|memoritzeu)\b",
    "vocative": _vocative(r"benvolgu[td]a?|estimad?[ta]|hola|atenció|nota\s+per\s+a|missatge\s+per\s+a",
                          r"assistent\w*|agent\w*|bot\w*|IA|AI", r"(?:l['’]\s*|el\s+|la\s+)?"),
    "function_words": "el la els les un una uns unes de del dels a al als en amb per i o però no és són va ser "
                      "està estan que es se seu seva seus seves aquest aquesta aquests això ho li hi jo tu ell ella "
                      "nosaltres vosaltres ells quan si com més molt ja tot tots també",
}

_GL_ASKS = _trigger(r"(?:alguén|calquera)\s+(?:\w+\s+){0,2}?(?:pregunt|consult)\w*",
                    r"dille|dilles|responde|respóndelle|respóndelles|recomenda|recoméndalle|recoméndalles"
                    r"|indícalle|envíao|remíteo")
_GL_ONLY = _only(r"recomendes|recomendade|recoméndalle|recoméndalles", r"só|soamente|unicamente|exclusivamente")
_GL: dict[str, str] = {
    "describing": r"\b(?:ataque\w*|investigador\w*)\b",
    "agent": r"\basistente\w*|\bchatbot\w*|\bmodelos?\s+de\s+linguaxe|\bintelixencia\s+artificial"
             r"|\baxentes?\s+de\s+IA\b",
    "ai_terms": r"\bintelixencia\s+artificial|\bmodelos?\s+de\s+linguaxe|\basistentes?\s+virtua\w*"
                r"|\baxentes?\s+de\s+IA\b",
    "directive": r"\b(?:debe|deben|debes|debería|deberían|deberías|ten\s+que|teñen\s+que|tes\s+que|hai\s+que"
                 r"|é\s+obrigatori\w*|está\s+obrigad\w*|por\s+favor|sempre|nunca|xamais|a\s+partir\s+de\s+agora"
                 r"|de\s+agora\s+en\s+diante|dende\s+agora|lembra|lembrade|non\s+esquezas|non\s+esquezades"
                 r"|sen\s+(?:confirma\w*|preguntar|pedir|aprobación)"
                 r"|dille|dilles|díganlle|respóndelle|respóndelles|recoméndalle|recoméndalles)\b"
                 + "|" + _GL_ASKS + "|" + _GL_ONLY,
    "you": r"\b(?:ti|teu|túa|teus|túas|vós|vosoutros|vosoutras|voso|vosa|vosos|vosas|contigo|vostede|vostedes)\b",
    "principal": r"\b(?:administrador\w*|desenvolvedor\w*|propietari[oa]\s+da\s+conta|titular\s+da\s+conta"
                 r"|o\s+usuario\s+(?:\w+\s+)?(?:pediu|solicitou|quere|prefire|desexa))\b",
    "instructions": r"\binstrucións\s+(?:\w+\s+)?(?:anteriores|previas|iniciais|orixinais|do\s+sistema)"
                    r"|\b(?:indicacións|directrices|regras)\s+(?:anteriores|previas|iniciais|orixinais)"
                    r"|\bprompt\s+do\s+sistema",
    "memory": r"(?<!tarxeta\sde\s)\bmemoria\b(?!\s+(?:RAM|USB|flash)\b)",
    "conversation": r"\bhistorial\s+(?:de\s+(?:a\s+|as\s+)?)?(?:conversa\w*|chat\w*|mensaxes)"
                    r"|\bdatos\s+d[oa]s?\s+usuari\w*|\bperfil\s+d[oa]s?\s+usuari\w*"
                    r"|\btodas\s+as\s+mensaxes\b|\bcada\s+mensaxe\b",
    "outputs": r"\b(?:cada|calquera)\s+(?:resposta|usuario|conversa|sesión)\b|\btodas\s+as\s+(?:túas\s+"
               r"|súas\s+)?respostas\b"
               r"|\btodas\s+as\s+(?:respostas|conversas|sesións)\b|\btodos\s+os\s+usuarios\b"
               r"|\b(?:conversas|sesións|respostas)\s+futuras\b"
               + "|" + _GL_ASKS + "|" + _GL_ONLY,
    "long_term": r"\bmemoria\s+(?:a\s+longo\s+prazo|persistente|permanente)"
                 r"|" + _forever(r"garda|gardade|almacena|almacenade|lembra|lembrade|memoriza|memorizade|conserva"
                                 r"|conservade", r"para\s+sempre|permanentemente|indefinidamente"),
    "save": r"\b(?:garda|gardade|almacena|almacenade|lembra|lembrade|anota|anotade|rexistra|rexistrade|engade"
            r"|engadide|memoriza|memorizade)\b",
    "vocative": _vocative(r"querid[oa]|estimad[oa]|ola|atención|nota\s+para|mensaxe\s+para",
                          r"asistente|axente|agente|bot|IA|AI", r"(?:o\s+|a\s+)?"),
    "function_words": "o a os as un unha uns unhas de do da dos das en no na nos nas con por para e ou pero non é "
                      "son foi ser está están que se seu súa seus súas este esta isto ese iso el ela eles elas "
                      "nós vós cando como máis moi xa todo todos tamén",
}

# Croatian, Bosnian and Serbian in Latin script (ijekavian and ekavian forms), and Serbian in
# Cyrillic script: one lexicon.
_SH_LATIN_ASKS = _trigger(r"(?:netko|neko|bilo\s+tko|bilo\s+ko)\s+(?:\w+\s+){0,2}?(?:pita|upita|zapita)\w*",
                          r"reci|recite|kaži|kažite|odgovori|odgovorite|preporuči|preporučite|uputi|uputite"
                          r"|pošalji|spomeni")
_SH_LATIN_ONLY = _only(r"preporuči(?:te)?|preporučuj(?:te)?|preporučuješ|preporučujete", r"samo|isključivo")
_SH_LATIN: dict[str, str] = {
    "describing": r"\b(?:napad\w*|istraživač\w*)\b",
    "agent": r"\basistent\w*|\bchat\s*bot\w*|\bčet\s*bot\w*|\bjezi[čk]n?\w*\s+model\w*|\bumjetn\w*\s+inteligencij\w*"
             r"|\bve?[šj]tačk\w*\s+inteligencij\w*|\bvještačk\w*\s+inteligencij\w*",
    "ai_terms": r"\bumjetn\w*\s+inteligencij\w*|\bve[šs]tačk\w*\s+inteligencij\w*|\bvještačk\w*\s+inteligencij\w*"
                r"|\bjezičn\w*\s+model\w*|\bjezičk\w*\s+model\w*|\bvirtualn\w*\s+asistent\w*|\bchatbot\w*|\bčetbot\w*",
    "directive": r"\b(?:mora[šm]?|moraju|morate|moramo|trebaš|trebate|treba|trebao\s+bi|trebala\s+bi|trebalo\s+bi"
                 r"|dužan|dužn[aio]|obavezn[oa]|molim(?:\s+(?:te|vas))?|uvijek|uvek|nikada|nikad|ubuduće|od\s+sada"
                 r"|odsad|odsada|zapamti(?:te)?|ne\s+zaboravi(?:te)?|ne\s+(?:smije|sme|smiješ|smeš|smijete|smete)"
                 r"|bez\s+(?:potvrde|pitanja|odobrenja|provjere|provere)"
                 r"|(?:reci|recite|kaži|kažite|odgovori|odgovorite|preporuči|preporučite)\s+(?:mu|joj|im))\b"
                 + "|" + _SH_LATIN_ASKS + "|" + _SH_LATIN_ONLY,
    "you": r"\b(?:ti|tebe|tebi|tobom|tvoj\w*|vas|vama|vaš\w*|svoj\w*)\b",
    "principal": r"\b(?:administrator\w*|programer\w*|developer\w*|vlasnik\w*\s+(?:računa|naloga)|operater\w*"
                 r"|korisni(?:k|ca)\s+(?:je\s+)?(?:zatraži\w*|traži|želi|zamoli\w*|tražio|tražila))",
    "instructions": r"\b(?:prethodn\w*|ranij\w*|izvorn\w*|originaln\w*|početn\w*|postojeć\w*|dosadašnj\w*)\s+"
                    r"(?:\w+\s+){0,2}?(?:uput\w*|instrukcij\w*|pravil\w*|smjernic\w*|smernic\w*|postavk\w*|prompt\w*)"
                    r"|\bsistemsk\w*\s+(?:prompt\w*|uput\w*)|\bsustavsk\w*\s+(?:prompt\w*|uput\w*)",
    "memory": r"\bmemorij(?:a|e|i|u|om)\b(?!\s+(?:kartic\w*|RAM)\b)|\bpamćenj(?:e|a|u|em)\b",
    "conversation": r"\b(?:povijest|istorij\w*|historij\w*)\s+(?:\w+\s+)?(?:razgovor\w*|chat\w*|ćaskanj\w*|poruk\w*)"
                    r"|\bpoda(?:c|t)\w*\s+(?:o\s+)?korisnik\w*|\bkorisničk\w*\s+(?:poda(?:c|t)\w*|profil\w*)"
                    r"|\bprofil\w*\s+korisnik\w*|\bsv(?:e|ih)\s+poruk\w*|\bsvaku\s+poruku\b",
    "outputs": r"\bsvak\w*\s+(?:odgovor\w*|korisnik\w*|razgovor\w*|sesij\w*)"
               r"|\bsv(?:i|e|ih|im|ima)\s+(?:odgovor\w*|korisnic\w*|korisnik\w*|razgovor\w*)"
               r"|\bbuduć\w*\s+(?:razgovor\w*|sesij\w*|odgovor\w*)"
               + "|" + _SH_LATIN_ASKS + "|" + _SH_LATIN_ONLY,
    "long_term": r"\bdugoročn\w*\s+(?:memorij\w*|pamćenj\w*)|\btrajn\w*\s+(?:memorij\w*|pamćenj\w*)"
                 r"|" + _forever(r"spremi(?:te)?|sačuvaj(?:te)?|pohrani(?:te)?|zapamti(?:te)?|upamti(?:te)?"
                                 r"|čuvaj(?:te)?",
                                 r"trajno|zauvijek|zauvek|zasvagda"),
    "save": r"\b(?:spremi(?:te)?|sačuvaj(?:te)?|pohrani(?:te)?|zapamti(?:te)?|zapiši(?:te)?|zabilježi(?:te)?"
            r"|zabeleži(?:te)?|dodaj(?:te)?|memoriši(?:te)?|upamti(?:te)?)\b",
    "vocative": _vocative(r"drag[ia]|poštovan[ia]|zdravo|bok|pozdrav|pažnja|napomena\s+za|poruka\s+za"
                          r"|bilješka\s+za|beleška\s+za",
                          r"asistent\w*|agent\w*|čet\s*bot\w*|chat\s*bot\w*|bot\w*|AI"),
    "function_words": "i u na je se da za od do s sa iz o a ali ili ne što koji koja koje kao kad kada ako bi su "
                      "sam smo ste biti bio bila bilo će ću ćemo ovaj ova ovo taj to još samo već pa te jer po "
                      "pri prema kroz nakon prije između bez poput kod uz preko oko dok gdje sve svi ga mu joj ih",
}
# Serbian in Cyrillic script, with the Macedonian forms of the same words: CLD2 names a Macedonian
# sentence Serbian, so it is read with this lexicon.
_SR_CYRILLIC_ASKS = _trigger(r"(?:неко|некој|било\s+ко)\s+(?:\w+\s+){0,2}?(?:пита|упита|праша)\w*",
                             r"реци|реците|кажи|кажите|одговори|одговорите|препоручи|препоручите|упути|пошаљи|препорачај")
_SR_CYRILLIC_ONLY = _only(r"препоручи(?:те)?|препоручуј(?:те)?|препоручујеш|препоручујете|препорачај",
                          r"само|искључиво|единствено")
_SR_CYRILLIC: dict[str, str] = {
    "describing": r"\b(?:напад\w*|истраживач\w*)\b",
    "agent": r"\bасистент\w*|\bчет\s*бот\w*|\bјезичк\w*\s+модел\w*|\bвештачк\w*\s+интелигенциј\w*",
    "ai_terms": r"\bвештачк\w*\s+интелигенциј\w*|\bјезичк\w*\s+модел\w*|\bвиртуелн\w*\s+асистент\w*|\bчетбот\w*",
    "directive": r"\b(?:мора[шм]?|морају|морате|морамо|требаш|требате|треба|требало\s+би|дужан|дужн[аио]"
                 r"|обавезн[оа]|молим(?:\s+(?:те|вас))?|увек|увијек|никада|никад|убудуће|од\s+сада|запамти(?:те)?"
                 r"|не\s+заборави(?:те)?|не\s+(?:сме|смеш|смете|смије)|без\s+(?:потврде|питања|одобрења|провере)"
                 r"|(?:реци|реците|кажи|кажите|одговори|одговорите|препоручи|препоручите)\s+(?:му|јој|им)"
                 r"|секогаш|никогаш|отсега|те\s+молам|ве\s+молам|без\s+потврда)\b"
                 + "|" + _SR_CYRILLIC_ASKS + "|" + _SR_CYRILLIC_ONLY,
    "you": r"\b(?:ти|тебе|теби|тобом|твој\w*|вас|вама|ваш\w*|свој\w*)\b",
    "principal": r"\b(?:администратор\w*|програмер\w*|власник\w*\s+(?:рачуна|налога)|оператер\w*"
                 r"|корисни(?:к|ца)\s+(?:је\s+)?(?:затражи\w*|тражи|жели|замоли\w*))",
    "instructions": r"\b(?:претходн\w*|раниј\w*|изворн\w*|оригиналн\w*|почетн\w*|постојећ\w*|досадашњ\w*)\s+"
                    r"(?:\w+\s+){0,2}?(?:упутств\w*|упут\w*|инструкциј\w*|правил\w*|смерниц\w*|подешавањ\w*"
                    r"|промпт\w*)|\bсистемск\w*\s+(?:промпт\w*|упутств\w*)",
    "memory": r"\bмемориј(?:а|е|и|у|ом)\b(?!\s+(?:картиц\w*|RAM)\b)|\bпамћењ(?:е|а|у|ем)\b",
    "conversation": r"\bисториј\w*\s+(?:\w+\s+)?(?:разговор\w*|ћаскањ\w*|порук\w*)|\bпода(?:ц|т)\w*\s+(?:о\s+)?"
                    r"корисник\w*|\bкорисничк\w*\s+(?:пода(?:ц|т)\w*|профил\w*)|\bпрофил\w*\s+корисник\w*"
                    r"|\bсв(?:е|их)\s+порук\w*|\bсваку\s+поруку\b|\bсите\s+пораки\b",
    "outputs": r"\bсвак\w*\s+(?:одговор\w*|корисник\w*|разговор\w*|сесиј\w*)"
               r"|\bсв(?:и|е|их|им|има)\s+(?:одговор\w*|корисниц\w*|корисник\w*|разговор\w*)"
               r"|\bбудућ\w*\s+(?:разговор\w*|сесиј\w*|одговор\w*)|\bсекој\s+(?:одговор|корисник)\w*"
               r"|\bсите\s+(?:одговори|корисници)\b"
               + "|" + _SR_CYRILLIC_ASKS + "|" + _SR_CYRILLIC_ONLY,
    "long_term": r"\bдугорочн\w*\s+(?:мемориј\w*|памћењ\w*)|\bтрајн\w*\s+(?:мемориј\w*|памћењ\w*)"
                 r"|" + _forever(r"сачувај(?:те)?|запамти(?:те)?|упамти(?:те)?|чувај(?:те)?|зачувај(?:те)?"
                                 r"|запомни(?:те)?",
                                 r"трајно|заувек|заувијек|засвагда|засекогаш"),
    "save": r"\b(?:сачувај(?:те)?|запамти(?:те)?|запиши(?:те)?|забележи(?:те)?|додај(?:те)?|упамти(?:те)?"
            r"|зачувај(?:те)?|запомни(?:те)?)\b",
    "vocative": _vocative(r"драг[иа]|поштован[иа]|здраво|пажња|напомена\s+за|порука\s+за|белешка\s+за",
                          r"асистент\w*|агент\w*|чет\s*бот\w*|бот\w*|AI"),
    "function_words": "и у на је се да за од до с са из о а али или не што који која које као кад када ако би су "
                      "сам смо сте бити био била било ће ћу ћемо овај ова ово тај то још само већ па те јер по "
                      "при према кроз након пре између без све сви га му јој их",
}

_SL_ASKS = _trigger(r"(?:nekdo|kdorkoli|(?:ko|če|kadar)\s+(?:\w+\s+)?kdo)\s+(?:\w+\s+){0,2}?(?:vpraša|sprašuje)\w*",
                    r"povej|povejte|odgovori|odgovorite|priporoči|priporočite|usmeri|pošlji|omeni", "ne")
_SL_ONLY = _only(r"priporoči(?:te)?|priporočaj(?:te)?|priporočaš|priporočate", r"le|samo|zgolj|izključno")
_SL: dict[str, str] = {
    "describing": r"\b(?:napad\w*|raziskoval\w*)\b",
    "agent": r"\basistent\w*|\bklepetaln\w*\s+robot\w*|\bchat\s*bot\w*|\bjezikovn\w*\s+model\w*"
             r"|\bumetn\w*\s+inteligenc\w*",
    "ai_terms": r"\bumetn\w*\s+inteligenc\w*|\bjezikovn\w*\s+model\w*|\bvirtualn\w*\s+asistent\w*"
                r"|\bklepetaln\w*\s+robot\w*",
    "directive": r"\b(?:mora[šm]?|morajo|morate|moramo|moral[aio]?\s+bi|bi\s+moral[aio]?|bi\s+morali|potrebno\s+je"
                 r"|dolžan|dolžn[aio]|obvezno|prosim|vedno|nikoli|odslej|od\s+(?:zdaj|sedaj)\s+naprej|v\s+prihodnje"
                 r"|zapomni(?:te)?\s+si|ne\s+pozabi(?:te)?|ne\s+(?:sme|smeš|smete)"
                 r"|brez\s+(?:potrditve|spraševanja|odobritve|vprašanja)"
                 r"|(?:povej|povejte|odgovori|odgovorite|priporoči|priporočite)\s+(?:mu|ji|jim))\b"
                 + "|" + _SL_ASKS + "|" + _SL_ONLY,
    "you": r"\b(?:ti|tebe|tebi|tabo|tvoj\w*|vas|vam|vami|vaš\w*|svoj\w*)\b",
    "principal": r"\b(?:skrbnik\w*|administrator\w*|razvijalc\w*|razvijalec|lastnik\w*\s+računa|imetnik\w*\s+računa"
                 r"|upravljavec\w*|uporabni(?:k|ca)\s+(?:je\s+)?(?:zahteval\w*|želi|prosil\w*|zaprosil\w*))",
    "instructions": r"\b(?:prejšnj\w*|predhodn\w*|prvotn\w*|izvirn\w*|začetn\w*|obstoječ\w*|dosedanj\w*)\s+"
                    r"(?:\w+\s+){0,2}?(?:navodil\w*|ukaz\w*|pravil\w*|smernic\w*|nastavit\w*|poziv\w*|prompt\w*)"
                    r"|\bsistemsk\w*\s+(?:poziv\w*|prompt\w*|navodil\w*)",
    "memory": r"\bspomin(?:a|u|om)?\b|\bpomnilnik(?:a|u|om)?\b",
    "conversation": r"\bzgodovin\w*\s+(?:\w+\s+)?(?:pogovor\w*|klepet\w*|sporočil\w*)|\bpodatk\w*\s+(?:o\s+)?"
                    r"uporabnik\w*|\buporabnišk\w*\s+(?:podatk\w*|profil\w*)|\bprofil\w*\s+uporabnik\w*"
                    r"|\bvsa\s+sporočila\b|\bvsako\s+sporočilo\b",
    "outputs": r"\bvsak\w*\s+(?:odgovor\w*|uporabnik\w*|pogovor\w*|sej\w*)"
               r"|\bvs(?:i|e|ih|em|im|ega)\s+(?:odgovor\w*|uporabnik\w*|pogovor\w*)"
               r"|\bprihodnj\w*\s+(?:pogovor\w*|sej\w*|odgovor\w*)"
               + "|" + _SL_ASKS + "|" + _SL_ONLY,
    "long_term": r"\bdolgoročn\w*\s+(?:spomin\w*|pomnilnik\w*)|\btrajn\w*\s+(?:spomin\w*|pomnilnik\w*)"
                 r"|" + _forever(r"shrani(?:te)?|zapomni(?:te)?\s+si|ohrani(?:te)?", r"trajno|za\s+vedno|za\s+zmeraj"),
    "save": r"\b(?:shrani(?:te)?|zapomni(?:te)?\s+si|zapiši(?:te)?|zabeleži(?:te)?|dodaj(?:te)?|ohrani(?:te)?)\b",
    "vocative": _vocative(r"drag[ia]|spoštovan[ia]|živijo|zdravo|pozor|opomba\s+za|sporočilo\s+za",
                          r"asistent\w*|agent\w*|robot\w*|bot\w*|AI"),
    "function_words": "in v na je se da za od do s z iz o pri po a ali ne ki kot ko če bi so sem smo ste biti "
                      "bil bila bilo bo bodo ta to tudi že samo še ker med brez pred nad pod vse vsi ga mu ji "
                      "jih njegov njen njihov jaz ti on ona mi vi oni tukaj tam kjer",
}

_BG_ASKS = _trigger(r"(?:някой|всеки)\s+(?:\w+\s+){0,2}?(?:пита|попита)\w*",
                    r"кажи|кажете|отговори|отговорете|препоръчай|препоръчайте|насочи|изпрати|спомени")
_BG_ONLY = _only(r"препоръчай(?:те)?|препоръчвай(?:те)?|препоръчваш|препоръчвате", r"само|единствено")
_BG: dict[str, str] = {
    "describing": r"\b(?:атак\w*|изследовател\w*)\b",
    "agent": r"\bасистент\w*|\bчат\s*бот\w*|\bезиков\w*\s+модел\w*|\bизкуствен\w*\s+интелект\w*",
    "ai_terms": r"\bизкуствен\w*\s+интелект\w*|\bезиков\w*\s+модел\w*|\bвиртуал\w*\s+(?:асистент|помощник)\w*"
                r"|\bчатбот\w*|\bчат\s+бот\w*",
    "directive": r"\b(?:трябва|би\s+трябвало|длъжен|длъжн[аио]|задължен\w*|задължително|моля|винаги|никога"
                 r"|отсега\s+нататък|от\s+сега\s+нататък|занапред|отсега|запомни(?:те)?|не\s+забравяй(?:те)?"
                 r"|без\s+(?:потвърждение|да\s+(?:питаш|питате|пита)|одобрение)"
                 r"|(?:кажи|кажете|отговори|отговорете|препоръчай|препоръчайте)\s+(?:му|ѝ|й|им))\b"
                 + "|" + _BG_ASKS + "|" + _BG_ONLY,
    "you": r"\b(?:ти|теб|тебе|твоя|твой|твоят|твоите|твое|твоето|твоята|вие|вас|ви|ваш\w*|своя\w*|своите|своето"
           r"|свой)\b",
    "principal": r"\b(?:администратор\w*|разработчи\w*|собственик\w*\s+на\s+(?:акаунта|профила|сметката)"
                 r"|притежател\w*\s+на\s+(?:акаунта|профила|сметката)|оператор\w*"
                 r"|потребител(?:ят|ката)\s+(?:е\s+)?(?:поиска|помоли|иска|желае|предпочита))",
    "instructions": r"\b(?:предишн\w*|предходн\w*|първоначалн\w*|оригиналн\w*|досегашн\w*|съществуващ\w*)\s+"
                    r"(?:\w+\s+){0,2}?(?:инструкци\w*|указани\w*|правила\w*|настройк\w*|промпт\w*)"
                    r"|\bсистемн\w*\s+(?:промпт\w*|инструкци\w*|подкан\w*)",
    "memory": r"(?<!карта\sс\s)\bпамет(?:та)?\b",
    "conversation": r"\bистори\w*\s+(?:на\s+)?(?:разговор\w*|чат\w*|съобщени\w*)|\bданн\w*\s+(?:на|за)\s+"
                    r"потребител\w*|\bпотребителск\w*\s+(?:данн\w*|профил\w*)|\bпрофил\w*\s+на\s+потребител\w*"
                    r"|\b(?:всички|всяко)\s+съобщени\w*",
    "outputs": r"\b(?:всеки|всяк\w*|всички)\s+(?:(?:твои|ваши|свои)\s+)?(?:отговор|потребител|разговор|сесии|сесия)\w*"
               r"|\bбъдещ\w*\s+(?:разговор|сесии|отговор)\w*"
               + "|" + _BG_ASKS + "|" + _BG_ONLY,
    "long_term": r"\bдългосрочн\w*\s+памет\w*|\bпостоянн\w*\s+памет\w*|\bтрайн\w*\s+памет\w*"
                 r"|" + _forever(r"запази(?:те)?|съхрани(?:те)?|запомни(?:те)?|пази(?:те)?",
                                 r"завинаги|за\s+постоянно|трайно"),
    "save": r"\b(?:запази(?:те)?|съхрани(?:те)?|запомни(?:те)?|запиши(?:те)?|добави(?:те)?|отбележи(?:те)?"
            r"|пази(?:те)?)\b",
    "vocative": _vocative(r"скъп[иа]|уважаем[иа]|здравей(?:те)?|здрасти|внимание|бележка\s+за|съобщение\s+за",
                          r"асистент\w*|агент\w*|бот\w*|помощник\w*|ИИ|AI"),
    "function_words": "и в във на с със за от до по при към че да не е са беше бил била било бъде ще се си като "
                      "но или ако когато който която което които това този тази тези то той тя те ние вие аз ти "
                      "го му ѝ им тук там след преди между без всички всичко също само още вече",
}

_LT_ASKS = _trigger(r"(?:kas\s+nors|(?:jei|kai|jeigu)\s+kas)\s+(?:\w+\s+){0,2}?(?:klaus|paklaus)\w*",
                    r"pasakyk|pasakykite|atsakyk|atsakykite|rekomenduok|rekomenduokite|nukreipk|siųsk|paminėk")
_LT_ONLY = _only(r"rekomenduok(?:ite)?|rekomenduoji|rekomenduojate", r"tik|vien|išskirtinai")
_LT: dict[str, str] = {
    "describing": r"\b(?:atak\w*|tyrėj\w*)\b",
    "agent": r"\basistent\w*|\bpokalbių\s+robot\w*|\bchat\s*bot\w*|\bkalbos\s+model\w*|\bdirbtin\w*\s+intelekt\w*",
    "ai_terms": r"\bdirbtin\w*\s+intelekt\w*|\bkalbos\s+model\w*|\bvirtual\w*\s+asistent\w*|\bpokalbių\s+robot\w*",
    "directive": r"\b(?:turi(?:te)?\s+\w+ti|turėtum\w*|turėtų|privalo|privalai|privalote|būtina|prašau|prašome"
                 r"|visada|visuomet|niekada|niekuomet|nuo\s+šiol|nuo\s+dabar|ateityje|atsimink(?:ite)?"
                 r"|prisimink(?:ite)?|nepamiršk(?:ite)?|be\s+(?:patvirtinimo|klausimo|klausimų|leidimo)"
                 r"|(?:pasakyk|pasakykite|atsakyk|atsakykite|rekomenduok|rekomenduokite)\s+(?:jam|jai|jiems))\b"
                 + "|" + _LT_ASKS + "|" + _LT_ONLY,
    "you": r"\b(?:tu|tave|tau|tavo|tavimi|jūs|jus|jums|jūsų|jumis)\b",
    "principal": r"\b(?:administrator\w*|kūrėj\w*|programuotoj\w*|paskyros\s+savinink\w*|operator\w*"
                 r"|(?:naudotojas|vartotojas)\s+(?:\w+\s+)?(?:paprašė|prašo|nori|pageidauja))",
    "instructions": r"\b(?:ankstesn\w*|ankstesni\w*|pradin\w*|originali\w*|esam\w*|dabartin\w*)\s+(?:\w+\s+){0,2}?"
                    r"(?:instrukcij\w*|nurodym\w*|taisykl\w*|nustatym\w*|prompt\w*)"
                    r"|\bsistemos\s+(?:instrukcij\w*|nurodym\w*|prompt\w*|raginim\w*)",
    "memory": r"\batmint(?:is|ies|į|yje|imi|ini|im)\b(?!\s+kortel)",
    "conversation": r"\bpokalbi\w*\s+istorij\w*|\bsusirašinėjimo\s+istorij\w*|\b(?:naudotoj|vartotoj)\w*\s+(?:duomen\w*"
                    r"|profil\w*)|\bvis(?:as|us|os|i)\s+(?:žinut|pranešim)\w*",
    "outputs": r"\bkiekvien\w*\s+(?:atsakym\w*|naudotoj\w*|vartotoj\w*|pokalb\w*|sesij\w*)"
               r"|\bvis(?:i|us|iems|ų|ose|uose|ais)\s+(?:atsakym\w*|naudotoj\w*|vartotoj\w*|pokalb\w*)"
               r"|\bbūsim\w*\s+(?:pokalb\w*|sesij\w*|atsakym\w*)"
               + "|" + _LT_ASKS + "|" + _LT_ONLY,
    "long_term": r"\bilgalaik\w*\s+atmint\w*|\bnuolatin\w*\s+atmint\w*|"
                 + _forever(r"išsaugok(?:ite)?|įsimink(?:ite)?|atsimink(?:ite)?|saugok(?:ite)?",
                            r"visam\s+laikui|visiems\s+laikams|amžinai"),
    "save": r"\b(?:išsaugok(?:ite)?|įsimink(?:ite)?|užsirašyk(?:ite)?|įrašyk(?:ite)?|pridėk(?:ite)?|atsimink(?:ite)?"
            r"|saugok(?:ite)?)\b",
    "vocative": _vocative(r"mielas|mieloji|miela|mielasis|brangus|gerbiamas|gerbiamoji|labas|sveiki|dėmesio"
                          r"|pastaba|žinutė",
                          r"asistent\w*|agent\w*|robot\w*|bot\w*|AI"),
    "function_words": "ir ar bet o kad kaip kai jei jeigu tai tas ta tie tos šis ši šie yra buvo bus būti į iš "
                      "su be per prie apie po už nuo iki dėl tarp ne nei taip pat tik dar jau aš tu jis ji mes "
                      "jūs jie jos jo jų savo kuris kuri kurie kas visi viskas",
}

_LV_ASKS = _trigger(r"kāds\s+(?:\w+\s+){0,2}?(?:jautā|pajautā|vaicā)\w*",
                    r"saki|sakiet|pasaki|pasakiet|atbildi|atbildiet|iesaki|iesakiet|nosūti|piemini|novirzi")
_LV_ONLY = _only(r"iesaki|iesakiet|ieteic", r"tikai|vienīgi")
_LV: dict[str, str] = {
    "describing": r"\b(?:uzbrukum\w*|pētniek\w*)\b",
    "agent": r"\basistent\w*|\bchat\s*bot\w*|\bčatbot\w*|\bvalodas\s+model\w*|\bmākslīg\w*\s+intelekt\w*"
             r"|\btērzēšanas\s+robot\w*",
    "ai_terms": r"\bmākslīg\w*\s+intelekt\w*|\bvalodas\s+model\w*|\bvirtuāl\w*\s+asistent\w*"
                r"|\btērzēšanas\s+robot\w*|\bčatbot\w*",
    "directive": r"\b(?:jā[^\W\d_]{3,}|vajag|vajadzētu|nepieciešams|obligāti|lūdzu|vienmēr|nekad|turpmāk"
                 r"|no\s+šī\s+brīža|no\s+šodienas|atceries|atcerieties|neaizmirsti|neaizmirstiet"
                 r"|bez\s+(?:apstiprinājuma|jautāšanas|atļaujas)"
                 r"|(?:saki|sakiet|pasaki|pasakiet|atbildi|atbildiet|iesaki|iesakiet)\s+(?:viņam|viņai|viņiem|viņām))\b"
                 + "|" + _LV_ASKS + "|" + _LV_ONLY,
    "you": r"\b(?:tu|tevi|tev|tavs|tava|tavu|tavā|tavas|tavi|tavos|tavām|jūs|jums|jūsu)\b",
    "principal": r"\b(?:administrator\w*|izstrādātāj\w*|konta\s+īpašniek\w*|operator\w*"
                 r"|lietotājs\s+(?:ir\s+)?(?:lūdzis|lūdza|vēlas|grib|pieprasīja))",
    "instructions": r"\b(?:iepriekšēj\w*|sākotnēj\w*|oriģināl\w*|esoš\w*|pašreizēj\w*)\s+(?:\w+\s+){0,2}?"
                    r"(?:instrukcij\w*|norādījum\w*|noteikum\w*|iestatījum\w*|uzvedn\w*|prompt\w*)"
                    r"|\bsistēmas\s+(?:instrukcij\w*|norādījum\w*|uzvedn\w*|prompt\w*)",
    "memory": r"\batmiņ(?:a|as|ā|u|ai)\b(?!\s+kart)",
    "conversation": r"\b(?:sarunu|sarunas|tērzēšanas|ziņu)\s+vēstur\w*|\blietotāj\w*\s+(?:dat\w*|profil\w*)"
                    r"|\bvis(?:as|us)\s+(?:ziņ|ziņojum)\w*",
    "outputs": r"\bkatr\w*\s+(?:atbild\w*|lietotāj\w*|sarun\w*|sesij\w*)"
               r"|\bvis(?:i|as|iem|ām|u|os|ās)\s+(?:atbild\w*|lietotāj\w*|sarun\w*)"
               r"|\bnākotn\w*\s+(?:sarun\w*|sesij\w*)|\bnākam\w*\s+(?:sarun\w*|sesij\w*)"
               + "|" + _LV_ASKS + "|" + _LV_ONLY,
    "long_term": r"\bilgtermiņa\s+atmiņ\w*|\bpastāvīg\w*\s+atmiņ\w*|"
                 + _forever(r"saglabā(?:jiet)?|atceries|atcerieties|iegaumē(?:jiet)?|glabā(?:jiet)?",
                            r"uz\s+visiem\s+laikiem|uz\s+mūžu|pastāvīgi|neatgriezeniski"),
    "save": r"\b(?:saglabā(?:jiet)?|atceries|atcerieties|iegaumē(?:jiet)?|pieraksti(?:et)?|ieraksti(?:et)?"
            r"|pievieno(?:jiet)?|glabā(?:jiet)?)\b",
    "vocative": _vocative(r"dārgais|dārgā|cienījamais|cienījamā|sveiks|sveiki|labdien|uzmanību|piezīme|ziņa",
                          r"asistent\w*|aģent\w*|robot\w*|bot\w*|MI|AI"),
    "function_words": "un ir bet vai ka kā kad ja tas tā tie tās šis šī šie bija būs būt uz no ar bez par pie pēc "
                      "pirms līdz starp pa caur ne nav arī tikai vēl jau es tu viņš viņa mēs jūs viņi viņas savu "
                      "sava sevi sevis kas kurš kura visi viss aiz zem virs pret ap priekš lai jo tad tur šeit",
}

_ET_ASKS = _trigger(r"(?:keegi|ükskõik\s+kes)\s+(?:\w+\s+){0,2}?küsi\w*",
                    r"ütle|öelge|vasta|vastake|soovita|soovitage|suuna|saada|maini", "ära ärge")
_ET_ONLY = _only(r"soovita(?:ge)?|soovitad|soovitate", r"ainult|üksnes|vaid")
_ET: dict[str, str] = {
    "describing": r"\b(?:rünnak\w*|rünnaku\w*|uurija\w*)\b",
    "agent": r"\b\w*assisten[dt]\w*|\bvestlusrobot\w*|\bchat\s*bot\w*|\b\w*keelemudel\w*|\btehisintellekt\w*"
             r"|\btehisaru\w*",
    "ai_terms": r"\btehisintellekt\w*|\btehisaru\w*|\b\w*keelemudel\w*|\bvirtuaal\w*\s*assisten[dt]\w*"
                r"|\bvestlusrobot\w*",
    "directive": r"\b(?:peab|peavad|pead|peate|peaks|peaksid|peaksite|tuleb|kohustatud|palun|alati|mitte\s+kunagi"
                 r"|kunagi|edaspidi|nüüdsest|tänasest|pea\s+meeles|pidage\s+meeles|ära\s+unusta|ärge\s+unustage"
                 r"|ilma\s+(?:kinnituseta|loata|nõusolekuta)|küsimata"
                 r"|(?:ütle|öelge|vasta|vastake|soovita|soovitage)\s+(?:talle|neile))\b"
                 + "|" + _ET_ASKS + "|" + _ET_ONLY,
    "you": r"\b(?:sina|sinu|sind|sulle|sinul|sinult|sinuga|teie|teid|teile|teil|teilt)\b",
    "principal": r"\b(?:\w*administraator\w*|arendaja\w*|konto\s+omanik\w*|kontoomanik\w*|haldur\w*"
                 r"|kasutaja\s+(?:on\s+)?(?:palunud|palus|soovib|tahab|eelistab))",
    "instructions": r"\b(?:varasem\w*|eelmis\w*|algse\w*|algs\w*|olemasolev\w*)\s+(?:\w+\s+){0,2}?"
                    r"(?:juhis\w*|juhend\w*|reegl\w*|sätt\w*|seadistus\w*|prompt\w*)"
                    r"|\bsüsteemi\s*(?:juhis\w*|viip\w*|prompt\w*)",
    "memory": r"\bmälu(?:sse|s|st|ga|le|l|lt)?\b",
    "conversation": r"\bvestlus(?:te)?\s*-?\s*(?:ajalugu|ajaloo\w*|logi\w*)|\bkasutaja(?:te)?\s*-?\s*(?:andme\w*"
                    r"|profiil\w*)|\b(?:kõik|iga)\s+sõnum\w*",
    "outputs": r"\b(?:iga|igale|igas|igasse|igast|kõik|kõigi|kõigile|kõigis|kõigisse)\s+(?:vastus\w*|vastuse\w*"
               r"|vastust\w*|vastuseid|kasutaja\w*|vestlus\w*|seanss\w*|seansi\w*)"
               r"|\btulevas\w*\s+(?:vestlus\w*|seanss\w*|seansi\w*)|\btulevik\w*\s+vestlus\w*"
               + "|" + _ET_ASKS + "|" + _ET_ONLY,
    "long_term": r"\bpikaajali\w*\s+mälu\w*|\bpüsiv\w*\s+mälu\w*|"
                 + _forever(r"salvesta(?:ge)?|jäta\s+meelde|jätke\s+meelde|pea\s+meeles|säilita(?:ge)?|talleta(?:ge)?",
                            r"jäädavalt|alatiseks|igaveseks|püsivalt"),
    "save": r"\b(?:salvesta(?:ge)?|jäta\s+meelde|jätke\s+meelde|pea\s+meeles|kirjuta\s+üles|kirjutage\s+üles"
            r"|lisa(?:ge)?|säilita(?:ge)?|talleta(?:ge)?|märgi(?:ge)?)\b",
    "vocative": _vocative(r"kallis|hea|austatud|tere|tähelepanu|märkus|sõnum",
                          r"\w*assisten[dt]\w*|agen[dt]\w*|\w*robot\w*|bot\w*|AI|TI"),
    "function_words": "ja ning on ei ole oli olid olen oled oleme või aga kuid et kui nagu see seda selle need "
                      "too ta tema nad mina sina ma sa me meie te teie mis kes kus millal miks kuidas sest siis "
                      "ka veel juba ainult nii väga kõik iga nende oma pärast enne ilma koos vahel üle läbi kuni "
                      "alates kell kella juures kaudu poolt järgi mitte siin seal nüüd enda end järel ees taga jaoks "
                      "kohta",
}

_SW_ASKS = _trigger(r"(?:mtu|yeyote)\s+(?:\w+\s+)?(?:akiuliza|anapouliza|atakapouliza|akikuuliza"
                    r"|atakayeuliza)", r"mwambie|waambie|mjibu|wajibu|mpendekezee|wapendekezee|mshauri|washauri")
_SW_ONLY = _only(r"pendekeza|upendekeze|mpendekeze|mpendekezee|wapendekezee", r"tu|pekee", 3)
_SW: dict[str, str] = {
    "describing": r"\b(?:shambulio|mashambulizi|watafiti)\b",
    "agent": r"\bmsaidizi\b|\bwasaidizi\b|\bakili\s+(?:bandia|mnemba)|\bmodeli\s+ya\s+lugha|\bchatbot\w*"
             r"|\broboti\s+wa\s+mazungumzo|\bwakala\s+wa\s+AI",
    "ai_terms": r"\bakili\s+(?:bandia|mnemba)|\bmodeli\s+ya\s+lugha|\b(?:msaidizi|wasaidizi)\s+(?:pepe|wa\s+kidijitali"
                r"|wa\s+AI)|\broboti\s+wa\s+mazungumzo",
    "directive": r"\b(?:lazima|sharti|inabidi|unapaswa|mnapaswa|anapaswa|inapaswa|wanapaswa|unatakiwa|mnatakiwa"
                 r"|anatakiwa|inatakiwa|tafadhali|daima|kila\s+(?:mara|wakati)|siku\s+zote|kamwe|usiwahi"
                 r"|kuanzia\s+(?:sasa|leo)|tangu\s+sasa|kumbuka|kumbukeni|usisahau|msisahau"
                 r"|bila\s+(?:ya\s+)?(?:kuthibitisha|uthibitisho|kuuliza|idhini|ruhusa)"
                 r"|mwambie|waambie|mpendekezee|wapendekezee)\b"
                 + "|" + _SW_ASKS + "|" + _SW_ONLY,
    "you": r"\b(?:wewe|nyinyi|ninyi|yako|wako|zako|lako|chako|vyako|kwako|kwenu|yenu|wenu|zenu|lenu|chenu"
           r"|vyenu)\b",
    "principal": r"\b(?:msimamizi|wasimamizi|msanidi\w*|wasanidi\w*|mmiliki\s+wa\s+akaunti|mwenye\s+akaunti"
                 r"|mtumiaji\s+(?:ame|ali|ana)(?:omba|taka|pendelea)\w*)\b",
    "instructions": r"\b(?:maagizo|maelekezo)\s+(?:\w+\s+){0,2}?(?:awali|zamani|yaliyotangulia|yaliyopita)\b"
                    r"|\b(?:kidokezo|maagizo|maelekezo)\s+(?:cha|ya)\s+mfumo\b",
    "memory": r"\bkumbukumbu\b(?!\s+(?:za|ya)\s+(?:mkutano|mikutano|kikao|vikao)\b)",
    "conversation": r"\bhistoria\s+ya\s+(?:mazungumzo|gumzo|ujumbe)|\b(?:data|taarifa)\s+(?:ya|za)\s+(?:mtumiaji"
                    r"|watumiaji)|\bwasifu\s+wa\s+(?:mtumiaji|watumiaji)|\bjumbe\s+zote\b|\bujumbe\s+wote\b",
    "outputs": r"\bkila\s+(?:jibu|mtumiaji|mazungumzo|kikao)\b|\bmajibu\s+yote\b|\bwatumiaji\s+wote\b"
               r"|\b(?:mazungumzo|vikao)\s+(?:ya|vya)\s+(?:baadaye|siku\s+zijazo)\b|\bmazungumzo\s+yajayo\b"
               + "|" + _SW_ASKS + "|" + _SW_ONLY,
    "long_term": r"\bkumbukumbu\s+ya\s+(?:muda\s+mrefu|kudumu)\b|"
                 + _forever(r"hifadhi|hifadhini|kumbuka|kumbukeni|weka|wekeni", r"milele|kwa\s+kudumu"),
    "save": r"\b(?:hifadhi|hifadhini|kumbuka|kumbukeni|andika|andikeni|ongeza|ongezeni|weka|wekeni|rekodi)\b",
    "vocative": _vocative(r"mpendwa|wapendwa|hujambo|salamu|tahadhari|angalizo|ujumbe\s+kwa",
                          r"msaidizi|wasaidizi|wakala|roboti|bot|AI")
                + r"|\b(?:msaidizi|wakala)\s+(?:\w+\s+)?mpendwa\s*[,:!]",
    "function_words": "na ya wa za la kwa ni si katika kama lakini au ambao ambayo ambaye hii hiyo huo hicho hizi "
                      "huu yake wake zake yao wao yeye mimi wewe sisi ninyi pia tu bado sana kila wote yote zote "
                      "baada kabla bila kuhusu kutoka hadi juu chini ndani kwamba ili iwapo kwenye",
}

_TL_ASKS = _trigger(r"(?:may|sinuman\s+ang|sinumang)\s+(?:nagtanong|magtanong|nagtatanong|magtatanong)",
                    r"sabihin|sabihan|sagutin|irekomenda|imungkahi|ituro|ipadala", "huwag")
_TL_ONLY = _only(r"irekomenda(?:\s+(?:mo|ninyo))?", r"lang|lamang")
_TL: dict[str, str] = {
    "describing": r"\b(?:pag-atake|pag-atakeng|mananaliksik)\b",
    "agent": r"\bkatulong\s+na\s+AI|\bAI\s+na\s+katulong|\bvirtual\s+na\s+(?:katulong|assistant|asistant)"
             r"|\bartipisyal\w*\s+na\s+(?:intelihensiya|katalinuhan)|\bchatbot\w*|\bmodelo\s+ng\s+wika|\basistant\b",
    "ai_terms": r"\bartipisyal\w*\s+na\s+(?:intelihensiya|katalinuhan)|\bmodelo\s+ng\s+wika"
                r"|\bvirtual\s+na\s+(?:katulong|assistant|asistant)|\bkatulong\s+na\s+AI",
    "directive": r"\b(?:dapat\s+(?:na|ng|mong|kang|ninyong|nilang|niyang|itong|ay|laging|palaging|siyang|kayong)"
                 r"|ay\s+dapat|kailangan\s+(?:mong|ninyong|niyang|nilang|kang|itong)|kailangang|pakiusap|mangyaring"
                 r"|pakitandaan|laging|palagi|palaging|kailanman|huwag\s+kailanman|mula\s+ngayon|simula\s+ngayon"
                 r"|tandaan|huwag\s+kalimutan\w*|nang\s+walang\s+(?:kumpirmasyon|pahintulot|pagtatanong|tanong)"
                 r"|walang\s+kumpirmasyon|(?:sabihin|sabihan|sagutin|irekomenda)\s+(?:mo|ninyo))\b"
                 + "|" + _TL_ASKS + "|" + _TL_ONLY,
    "you": r"\b(?:ikaw|iyo|iyong|inyo|inyong|kayo|ninyo|mo)\b",
    "principal": r"\b(?:tagapangasiwa|tagabuo|may[-\s]ari\s+ng\s+account"
                 r"|(?:hiniling|gusto|ipinakiusap)\s+ng\s+(?:user|gumagamit))\b",
    "instructions": r"\b(?:naunang|dating|orihinal\s+na|kasalukuyang|unang)\s+(?:mga\s+)?(?:tagubilin|instruksiyon"
                    r"|instruksyon|utos|panuto|patakaran)\w*|\b(?:tagubilin|instruksiyon|instruksyon|utos|panuto)"
                    r"\s+(?:ng|sa)\s+sistema\b",
    "memory": r"\bmemorya\b",
    "conversation": r"\bkasaysayan\s+ng\s+(?:usapan|pag-uusap|chat|mensahe)|\b(?:data|profile|impormasyon)\s+ng\s+"
                    r"(?:mga\s+)?(?:user|gumagamit)\b|\blahat\s+ng\s+(?:mga\s+)?mensahe\b",
    "outputs": r"\bbawat\s+(?:sagot|tugon|user|gumagamit|usapan|pag-uusap|session)\b"
               r"|\blahat\s+ng\s+(?:mga\s+)?(?:sagot|tugon|user|gumagamit|usapan)\b"
               r"|\bsusunod\s+na\s+(?:mga\s+)?(?:usapan|pag-uusap|session)\b"
               + "|" + _TL_ASKS + "|" + _TL_ONLY,
    "long_term": r"\bpangmatagalang\s+(?:memorya|alaala)\b|\bpermanenteng\s+memorya\b"
                 r"|" + _forever(r"i-?save|itago|tandaan|itala|isulat", r"nang\s+permanente|magpakailanman|habambuhay"),
    "save": r"\b(?:i-?save|itago|tandaan|isulat|itala|idagdag|ilagay|irekord)\b",
    "vocative": _vocative(r"mahal\s+na|minamahal\s+na|kumusta|hoy|pansin|paalala\s+sa|mensahe\s+sa"
                          r"|tala\s+para\s+sa",
                          r"katulong|assistant|asistant|ahente|agent|bot|AI", r"(?:ang\s+|sa\s+)?"),
    "function_words": "ang ng sa mga na at ay si ni kay para ito iyon iyan dito doon siya sila kami tayo kayo ako "
                      "ikaw ka mo ko niya nila namin natin ninyo kung kapag dahil pero o hindi oo rin din lang pa "
                      "po ba may mayroon wala lahat bawat nang",
}

_AF_ASKS = _trigger(r"iemand\s+(?:\w+\s+){0,3}?(?:vra|vrae)", r"sê|vertel|antwoord|beveel|verwys|stuur|noem",
                    "moenie")
_AF_ONLY = (r"\bjy\s+(?:slegs|net|uitsluitlik)\s+(?:[\w-]+\s+){0,4}?aanbeveel\b"
            r"|\bbeveel\s+(?:[\w-]+\s+){0,4}?(?:slegs|net|uitsluitlik)\b")
_AF: dict[str, str] = {
    "describing": r"\b(?:aanval\w*|navorsers)\b",
    "agent": r"\b\w*assistent\w*|\bkletsbot\w*|\bgeselsbot\w*|\bchatbot\w*|\b\w*taalmodel\w*"
             r"|\bkunsmatige\s+intelligensie",
    "ai_terms": r"\bkunsmatige\s+intelligensie|\b\w*taalmodel\w*|\bvirtuele\s+assistent\w*|\bkletsbot\w*"
                r"|\bgeselsbot\w*",
    "directive": r"\b(?:moet|moenie|behoort|asseblief|altyd|nooit|voortaan|van\s+nou\s+af|vanaf\s+nou|onthou"
                 r"|sonder\s+(?:om\s+te\s+vra|bevestiging|goedkeuring|toestemming)"
                 r"|(?:sê|vertel|antwoord)\s+(?:vir\s+)?(?:hom|haar|hulle))\b"
                 + "|" + _AF_ASKS + "|" + _AF_ONLY,
    "you": r"\b(?:jy|jou|jouself|julle)\b",
    "principal": r"\b(?:\w*administrateur\w*|ontwikkelaar\w*|rekeninghouer\w*|rekeningeienaar\w*|operateur\w*"
                 r"|die\s+gebruiker\s+(?:het\s+)?(?:gevra|versoek|verkies))",
    "instructions": r"\b(?:vorige|voorafgaande|oorspronklike|bestaande|bogenoemde|vroeëre|eerdere)\s+(?:\w+\s+){0,2}?"
                    r"(?:instruksies|opdragte|riglyne|reëls|instellings|aanwysings|prompt\w*)"
                    r"|\bstelsel(?:opdrag|prompt|instruksies)\w*",
    "memory": r"\b(?:langtermyn)?geheue\b",
    "conversation": r"\b(?:gesprek|klets|gesels)s?geskiedenis\b|\bgebruiker(?:s)?(?:data|inligting|profiel)\w*"
                    r"|\bgebruiker\s*se\s+(?:data|inligting|profiel)|\balle\s+boodskappe\b|\belke\s+boodskap\b",
    "outputs": r"\b(?:elke|alle)\s+(?:(?:jou|u)\s+)?(?:antwoord|antwoorde|gebruiker|gebruikers|gesprek|gesprekke"
               r"|sessie|sessies)\b"
               r"|\b(?:toekomstige|latere)\s+(?:gesprekke|sessies)\b"
               + "|" + _AF_ASKS + "|" + _AF_ONLY,
    "long_term": r"\blangtermyngeheue\b|\blangtermyn\s*-?\s*geheue\b|\bpermanente\s+geheue\b"
                 r"|" + _forever(r"stoor|bewaar|onthou", r"vir\s+(?:altyd|ewig)|permanent"),
    "save": r"\b(?:stoor|bewaar|onthou|skryf\s+neer|voeg\s+by|teken\s+aan)\b",
    "vocative": _vocative(r"liewe|beste|geagte|hallo|haai|let\s+wel|aandag|nota\s+vir|boodskap\s+vir",
                          r"\w*assistent|agent|bot|KI|AI", r"(?:die\s+)?"),
    "function_words": "die en of maar nie is was wees het sal kan moet wil van vir met op in aan by uit na deur "
                      "dat wat wie waar hoe hierdie daardie dit jy jou ek ons hulle hy sy julle as ook nog al net "
                      "baie so toe nou om te",
}


def _both(latin: dict[str, str], cyrillic: dict[str, str]) -> dict[str, str]:
    """One language written in two scripts: each class matches either (function words: the
    second script's, the first having its own entry)."""
    return {k: (cyrillic[k] if k == "function_words" else f"{latin[k]}|{cyrillic[k]}") for k in latin}


# CLD2 code -> class -> regex. Croatian, Bosnian and Serbian (and Montenegrin, which CLD2 names
# apart) share a lexicon, as Bokmål and Nynorsk do.
LANGUAGES: dict[str, dict[str, str]] = {
    "cs": _CS, "sk": _SK, "ro": _RO, "hu": _HU, "fi": _FI, "sv": _SV, "da": _DA,
    "no": {**_NO, "function_words": _NB_WORDS}, "nn": {**_NO, "function_words": _NN_WORDS},
    "ca": _CA, "gl": _GL,
    "hr": _SH_LATIN, "bs": _SH_LATIN, "sr": _both(_SH_LATIN, _SR_CYRILLIC), "sr-ME": _both(_SH_LATIN, _SR_CYRILLIC),
    "sl": _SL, "bg": _BG, "lt": _LT, "lv": _LV, "et": _ET, "sw": _SW, "tl": _TL, "af": _AF,
}
CLASSES = ("agent", "ai_terms", "directive", "you", "principal", "instructions", "memory", "conversation", "outputs",
           "long_term", "save", "vocative", "describing", "function_words")


def of(name: str) -> tuple[str, ...]:
    """The regexes of class ``name`` over ``LANGUAGES``, each once, in order; the empty ones left
    out."""
    if name not in CLASSES:
        raise KeyError(name)
    out: dict[str, None] = {}
    for classes in LANGUAGES.values():
        if pattern := classes.get(name, ""):
            out[pattern] = None
    return tuple(out)


def function_words() -> tuple[frozenset[str], ...]:
    """Each language's function words (a set once for languages that share them)."""
    return tuple(frozenset(s.split()) for s in of("function_words"))

