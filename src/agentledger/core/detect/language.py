"""Whether the instruction detector can judge a text at all: its script and its language.

The instruction patterns and the word classes (``address.py``) know 43 languages. A text in any
other says nothing to them, and their silence is then no evidence that it is harmless: an
attack in Maltese or Tamil passes as a fact. This module tells such text apart, so that the
memory policy can hold it for review instead of writing it on the detector's silence:

- by script: a segment whose letters are mostly in a script none of the 43 languages is
  written in (Tamil, Bengali, Georgian, Armenian, Ethiopic, …) is not judged;
- by function words: in Latin, Cyrillic and Arabic script, a segment of six words or more of
  which fewer than ``MIN_COVERAGE`` are function words of any one known language (articles,
  pronouns, prepositions, conjunctions, auxiliaries: closed classes, a few dozen words each)
  is not judged. Ordinary prose in a known language has a quarter to a half of its words in
  that class; a log line or a list of names has few words or none, and is left alone only
  when it is shorter than six words;
- by name: each line, sentence, quoted or parenthesised stretch of four words or more is given
  to CLD2 (``identify.py``), which names its language among 83; one it reliably names outside
  ``KNOWN`` (half of the stretch or more) is not judged. The two tests above let a close
  relative through (Macedonian read as Serbian or Bulgarian, Belarusian as Ukrainian, Nepali
  as Hindi by its script); a name does not. A text is judged as it stands and as each layer a
  model would read out of it (``unveil.layers``: one word a line joined, quoted-printable
  decoded, words turned round), so laying a sentence out one word a line does not hide its
  language.

Each part of a page is judged apart: the text a reader sees, and the parts that carry words
without showing them in the flow of the page (``content``, ``title``, ``alt`` and
``aria-label`` attributes, SVG ``<desc>`` and ``<title>``, CSS ``content:`` strings), so that
a sentence in an unknown language tucked into a page's metadata is not outvoted by the page.
"""

from __future__ import annotations

import codecs
import functools
import re
import unicodedata

from agentledger.core.detect import lexicon, unveil
from agentledger.core.detect.identify import identify

# Scripts the detector reads as a whole (one known language each, or the CJK three).
_KNOWN_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI", "HEBREW", "GREEK", "DEVANAGARI",
                  "IDEOGRAPHIC", "FULLWIDTH", "HALFWIDTH")
# Scripts shared by known and unknown languages: judged by their function words.
_WORD_SCRIPTS = ("LATIN", "CYRILLIC", "ARABIC")
# Function words per known language written in a shared script (en es fr de pt it tr pl nl vi id
# ru uk ar fa, then those of lexicon.LANGUAGES), closed classes only.
_FUNCTION_WORDS: tuple[frozenset[str], ...] = tuple(frozenset(s.split()) for s in (
    "the a an of to in on at for with from by and or but not no is are was were be been has have had do "
    "does did will would can could should must may this that these those it its you your we our they "
    "their he she his her i my me if when as than then there here all any every what which who us them him "
    "so up out over after before about into through during without between under again off very how "
    "why where also just only now more most some each one two first last new please thanks yes get",
    "el la los las un una unos de del al a en con por para y o pero no es son fue ser está están "
    "que se su sus lo le les este esta estos mi tu yo usted nos cuando si como más muy ya todo todos",
    "le la les un une des de du au aux à en dans sur pour par avec et ou mais ne pas est sont été être "
    "a ont que qui se sa son ses ce cette ces il elle nous vous ils je tu votre vos notre si quand plus",
    "der die das den dem des ein eine einen einem einer und oder aber nicht kein keine ist sind war "
    "wird werden hat haben zu im in am an auf mit von für bei aus nach sie er es wir ihr ich du sich "
    "dass wenn als auch noch nur so wie ihre ihren sein",
    "o a os as um uma de do da dos das em no na nos nas por para com e ou mas não é são foi ser está "
    "que se seu sua seus suas ele ela eles nós você quando como mais muito já todo todos ao",
    "il lo la i gli le un una di del della dei degli a al alla in nel nella con per su da e o ma non "
    "è sono era essere ha hanno che si suo sua suoi questo questa quando come più anche tutti",
    "bir ve ile için bu şu o da de ki mi mı mu mü değil var yok ama veya gibi daha çok en her ne "
    "sen ben biz siz onlar olarak olan",
    "i w we z ze na do od o u za po przez dla a ale lub nie jest są był była być to ten ta te tego "
    "się że jak czy gdy już tak co który która które jego jej ich ty pan przed przy pod nad bez oraz także też "
    "jako tylko może wszystkie wszystko nasz wasz swoje mój twój proszę",
    "de het een en of maar niet geen is zijn was waren wordt worden heeft hebben te in op aan met "
    "van voor bij uit naar door dat die dit deze je jij u we wij ze zij hij ik als ook nog wel er om",
    "và của là có không được cho các những một này đó khi nếu thì với trong để người bạn tôi chúng "
    "đã sẽ đang rất cũng như từ ra vào theo về bị nên hay lại rồi sau trước trên dưới nào gì ai hãy xin",
    "dan yang di ke dari dengan untuk dalam pada ini itu adalah tidak bukan akan sudah ada atau "
    "tetapi juga saya anda kami kita mereka ia jika karena seperti lebih semua",
    "и в во не на с со что как а но или по к от до за из у о об для это этот эта эти был была было "
    "быть есть он она они мы вы я ты его её их если когда уже все всё так же то",
    "і й в у на з із що як а але або по до від за для це цей ця ці був була було бути є він вона "
    "вони ми ви я ти його її їх якщо коли вже всі так же не",
    "في من إلى على عن مع هذا هذه ذلك التي الذي أن إن لا ما هو هي هم كان كانت قد لم لن كل أو ثم "
    "و ب ل بين عند إذا كما أي",
    "و در به از که را این آن با برای است بود هست نیست شد می ها های یک هر اگر تا یا اما هم "
    "من تو او ما شما آنها خود",
)) + lexicon.function_words()
_ANY_FUNCTION_WORD = frozenset().union(*_FUNCTION_WORDS)
_ARABIC = 13  # the index of Arabic's function words
MIN_COVERAGE = 0.12
MIN_WORDS = 6
MIN_CLAUSE = 3
_CLAUSE = re.compile(r"[,;:|•·/()\[\]{}<>=\n\t]+|\s[-–—]\s|[.!?。](?:\s|$)")
MIN_LETTERS = 12
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
# What is not prose in any language: addresses, links, data URIs, JSON keys, identifiers with a
# digit or an underscore, long runs of letters (encoded data).
_NOT_PROSE = re.compile(r"\S+@\S+|\w+://\S+|data:\S+|\"[^\"\n]{1,60}\"\s*:|\S*[\d_]\S*|\S{25,}")
# The Arabic article and the conjunctions and prepositions written onto the next word: in
# Arabic they are its commonest function words.
_ARABIC_CLITIC = re.compile(r"^(?:[وفبل]?ال|لل|[وف](?=\w{2}))")
_TAG = re.compile(r"<!--.*?-->|<[^<>]{0,2000}>", re.DOTALL)
# Word-carrying parts a page does not show in its flow: group ``v``.
_CARRIERS = re.compile(
    r"\b(?:content|title|alt|aria-label|aria-description|placeholder|label|summary)\s*=\s*"
    r"(?:\"(?P<v>[^\"]*)\"|'(?P<w>[^']*)')"
    r"|<(?P<el>desc|title)\b[^>]*>(?P<x>.*?)</(?P=el)\s*>"
    r"|\bcontent\s*:\s*(?:\"(?P<y>[^\"]*)\"|'(?P<z>[^']*)')",
    re.IGNORECASE | re.DOTALL)


@functools.lru_cache(maxsize=4096)
def _script_of(c: str) -> str:
    """``known``, ``word`` (a shared script) or the name of a script the detector does not read."""
    if c.isascii():
        return "word"
    name = unicodedata.name(c, "")
    if name.startswith(_KNOWN_SCRIPTS):
        return "known"
    if name.startswith(_WORD_SCRIPTS):
        return "word"
    return name.split(" ", 1)[0] or "OTHER"


def _prose_words(segment: str) -> list[str]:
    """The words of ``segment`` that say what language it is in, in the scripts judged by their
    words, without the capitalised words inside a clause (names, brands, a title's nouns) that are not
    a function word (a clause's first word stays, or a sentence turned by a shift of its letters
    would lose it); none when most
    of its words are in clauses of one or two (a list of names, tags or ingredients is in no
    language)."""
    clauses = [[w for w in _WORD.findall(c) if _script_of(w[0]) == "word"]
               for c in _CLAUSE.split(_NOT_PROSE.sub(" ", segment))]
    words = [w for c in clauses for w in c]
    if 2 * sum(len(c) for c in clauses if len(c) >= MIN_CLAUSE) < len(words):
        return []
    return [f for c in clauses for i, w in enumerate(c)
            if (f := w.casefold()) in _ANY_FUNCTION_WORD or i == 0 or not w[0].isupper()]


def _judge(segment: str) -> str | None:
    """Why one segment cannot be judged, or None."""
    letters = [c for c in segment if c.isalpha()]
    if len(letters) < MIN_LETTERS:
        return None
    scripts: dict[str, int] = {}
    for c in letters:
        s = _script_of(c)
        scripts[s] = scripts.get(s, 0) + 1
    other = {s: n for s, n in scripts.items() if s not in ("known", "word")}
    if sum(other.values()) * 2 >= len(letters):
        return f"script {max(other, key=other.__getitem__).lower()} is not one the detector reads"
    if scripts.get("word", 0) * 2 >= len(letters) and not _named_known(segment):
        words = _prose_words(segment)
        if len(words) >= MIN_WORDS:
            best = max(sum(w in fw for w in words) for fw in _FUNCTION_WORDS)
            best = max(best, sum(bool(_ARABIC_CLITIC.match(w)) or w in _FUNCTION_WORDS[_ARABIC] for w in words))
            if best < MIN_COVERAGE * len(words):
                return f"{best} of {len(words)} words are function words of a language the detector knows"
    return _named_unknown(segment)


# The languages of the word classes, as CLD2 names them (``iw`` Hebrew, ``zh-Hant`` traditional
# Chinese).
KNOWN = frozenset(("en", "zh", "zh-Hant", "es", "fr", "de", "ja", "ru", "pt", "it", "ko", "ar", "iw", "hi", "th",
                   "el", "uk", "tr", "pl", "nl", "vi", "id", "fa", *lexicon.LANGUAGES))
MIN_NAMED_WORDS = 4
MIN_NAMED_SHARE = 50
ROT13_MIN_SCORE = 500.0
# CLD2 naming a segment as a known language this surely (share, score) stands for its function words.
NAMED_KNOWN_SHARE = 90
NAMED_KNOWN_SCORE = 1000.0


def _named_known(segment: str) -> bool:
    """Whether CLD2 names nearly all of ``segment`` as one known language with the score of prose.

    Terse text in a known language (a calendar entry, a product review, a Vietnamese note, whose
    syllables are words) may have few of its function words; the function-word test is for
    languages CLD2 cannot name or confuses with a relative, which it names at a low score or for
    part of the text only."""
    found = identify(_NOT_PROSE.sub(" ", segment))
    return (found is not None and found.reliable and found.code in KNOWN and found.percent >= NAMED_KNOWN_SHARE
            and found.score >= NAMED_KNOWN_SCORE)


def _named_unknown(segment: str) -> str | None:
    """The first stretch of ``segment`` CLD2 reliably names in a language outside ``KNOWN``."""
    for stretch in unveil.stretches(_NOT_PROSE.sub(" ", segment)):
        if sum(c.isalpha() for c in stretch) < MIN_LETTERS or len(_WORD.findall(stretch)) < MIN_NAMED_WORDS:
            continue
        found = identify(stretch)
        if (found is not None and found.reliable and found.code not in KNOWN
                and found.percent >= MIN_NAMED_SHARE):
            return f"it is in {found.name}, a language the detector has no word classes for"
    return None


def _reads_as_rot13(segment: str) -> bool:
    """Whether ``segment`` is rot13 of a language the detector knows, which it reads
    (``instructions._rot13_reads_better``): judged, and CLD2 names a known language in it
    with the score of prose (a Slovak sentence turned by rot13 reads as "German" at a score of
    162, an English one at 1,000 or more)."""
    turned = codecs.encode(segment, "rot13")
    if _judge(turned) is not None:
        return False
    found = identify(_NOT_PROSE.sub(" ", turned))
    return found is None or (found.code in KNOWN and found.score >= ROT13_MIN_SCORE)


def segments(text: str) -> list[str]:
    """The parts of ``text`` judged apart: what a reader sees (markup removed) and each
    word-carrying attribute, SVG description or CSS ``content`` string."""
    parts = [next(g for g in m.groups()[-6:] if g is not None) if m.group("el") is None else m.group("x")
             for m in _CARRIERS.finditer(text)]
    # Minus the carriers, what is left is the flow a reader sees.
    flow = _TAG.sub(" ", _CARRIERS.sub(" ", text)) if parts else _TAG.sub(" ", text)
    return [flow, *(_TAG.sub(" ", p) for p in parts)]


def unjudged(text: str) -> str | None:
    """Why the instruction detector cannot judge ``text`` (a part of it in a script or a language
    it has no word classes for), or None when it can."""
    norm = unveil.as_letters(unicodedata.normalize("NFKC", text))
    for view in (norm, *unveil.layers(norm)):
        for i, part in enumerate(segments(view)):
            why = _judge(part)
            if why is not None and not _reads_as_rot13(part):
                return why if i == 0 else f"page metadata: {why}"
    return None
