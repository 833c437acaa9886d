"""Instructions aimed at the agent's own policy, hidden in data ("prompt injection").

What is looked for is an imperative addressed to the agent about how it should
behave or what it must keep, not a statement about the world: "ignore previous
instructions", "ignore deletion requests", "keep everything forever", "from now
on always …", "reveal the system prompt", "you are now DAN". Each kind says which
part of the policy the text tries to change. A genuine user preference may read
like one ("always answer in Chinese"): this module only reports; the policy
decides by source (an instruction is poison when it comes from a document, a web
page or tool output quoting one, or when a non-user source writes a rule).

Patterns cover English, Chinese, Spanish, French, German, Japanese, Russian and
Portuguese. Descriptions ("the user prefers Chinese", "build No.19 passed",
"the README has install instructions") must not match: the verbs are
imperative forms and their objects are the agent's instructions, memory, data
or rules.

Text is normalised before it is matched, so an instruction a model reads the
same way is found however it is written: NFKC (fullwidth, mathematical and
circled letters, ligatures), zero-width, invisible and direction-control
characters removed, combining marks composed or dropped (a strike-through
overlay), and letters that look like Latin ones (the Cyrillic i U+0456, the Greek
omicron, small capitals) mapped to their skeleton in a second view, so Russian is
still matched as Russian. Unicode TAG characters (U+E0020 to U+E007E, invisible ASCII) are
removed from the text and matched as the hidden text they spell. Findings are
spans of the original text.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from agentledger.core.detect.finding import Finding, non_overlapping

_I = re.IGNORECASE | re.UNICODE

# Objects that name the agent's instructions.
_EN_RULES = (r"(?:instructions?|rules?|directions?|directives?|prompts?|guidelines?|guardrails?|policies"
             r"|policy|constraints?|programming|orders?|commands?|context|restrictions?|safeguards?|filters?)")
_EN_PRIOR = (r"(?:all|any|every|the|your|my|previous|prior|above|earlier|preceding|former|original|existing"
             r"|old|initial|system|safety|other|of|these|those|\s)*")
_EN_DATA = (r"(?:anything|everything|any(?:thing)? of (?:it|this)|it|(?:any|all|this|these|the|my|our|their|your"
            r"|user'?s?|stored|saved)\s+(?:\w+\s+)?(?:data|records?|memor(?:y|ies)|conversations?|chats?|history"
            r"|messages?|information|facts?|logs?|notes?|entries|files))")
_DELETE = r"(?:delete|erase|forget|remove|purge|wipe|discard|clear)"

_PATTERNS: dict[str, list[str]] = {
    "override_instructions": [
        # en
        rf"\b(?:ignore|disregard|forget|override|bypass|skip|drop|abandon|discard|neglect)\s+{_EN_PRIOR}{_EN_RULES}\b",
        rf"\b(?:do not|don't|stop)\s+(?:follow(?:ing)?|obey(?:ing)?)\s+{_EN_PRIOR}{_EN_RULES}\b",
        r"\bforget\s+(?:everything|all)\s+(?:you\s+(?:were|have been)\s+told|above|before|previously)\b",
        r"\b(?:new|updated|real|actual|revised)\s+(?:instructions?|rules?|directives?|system\s+prompt)\s*[:：]",
        r"\binstead\s+of\s+(?:your|the)\s+(?:instructions|rules)\b",
        # zh
        r"(?:忽略|忽视|无视|無視|不要理会|不要理會|忘记|忘記|忘掉|跳过|绕过|覆盖|放弃)(?:掉)?(?:你)?(?:之前|以前|先前|上面|上述|以上|前面|所有|全部|一切|原来|原有|原先|的|所|有)*(?:的)?(?:指令|指示|说明|說明|规则|規則|要求|提示|约束|限制|设定|設定|命令)",
        # es
        r"\b(?:ignora|ignore|ignoren|ignorad|olvida|olvide|olviden|omite|descarta|desobedece)\s+(?:tod[oa]s\s+)?(?:l[oa]s\s+|tus\s+|sus\s+)?(?:instrucciones|reglas|indicaciones|órdenes|directrices|normas)",
        # fr
        r"\b(?:ignore[zs]?|oublie[zs]?|néglige[zs]?|contourne[zs]?|outrepasse[zs]?)\s+(?:tou(?:te)?s\s+)?(?:les|tes|vos|ces)\s+(?:instructions|règles|consignes|directives|ordres)",
        # de
        r"\b(?:ignoriere|ignorier|ignorieren\s+sie|vergiss|vergessen\s+sie|missachte|übergehe)\s+(?:bitte\s+)?(?:alle\s+)?(?:deine\s+|ihre\s+|die\s+|bisherigen\s+|vorherigen\s+|früheren\s+|obigen\s+)*(?:Anweisungen|Regeln|Instruktionen|Vorgaben|Befehle|Richtlinien)",
        # ja
        r"(?:以前|前|これまで|上記|すべて|全て|今まで)?の?(?:指示|命令|ルール|指令|規則|設定)(?:を|は)?(?:すべて|全て)?(?:無視|忘れ)",
        # ru
        r"(?:игнорируй|игнорируйте|проигнорируй|забудь|забудьте|не\s+обращай\s+внимания\s+на|отбрось)\s+(?:все\s+)?(?:предыдущие\s+|прежние\s+|свои\s+|твои\s+|эти\s+)*(?:инструкции|правила|указания|команды|ограничения)",
        # pt
        r"\b(?:ignore|ignora|ignorem|esqueça|esqueca|esquece|desconsidere|desconsidera)\s+(?:tod[oa]s\s+)?(?:as\s+|os\s+|suas\s+|tuas\s+)?(?:instruções|instrucoes|regras|orientações|diretrizes|ordens)",
    ],
    "deletion_override": [
        # en
        r"\b(?:ignore|disregard|reject|refuse|decline|deny)\s+(?:all\s+|any\s+|every\s+|the\s+|future\s+|user\s+)*(?:[\w'-]+\s+)?(?:deletion|delete|removal|erasure|forget(?:ting)?|purge|gdpr)\s+(?:requests?|commands?|instructions?|orders?)",
        rf"\b(?:do not|don't|never|must not|mustn't|shall not)\s+(?:ever\s+)?{_DELETE}\s+{_EN_DATA}",
        r"\b(?:even\s+if|when)\s+(?:the\s+)?(?:user|anyone|they)\s+(?:asks?|requests?)\s+(?:you\s+)?to\s+(?:delete|forget|erase|remove)",
        # zh
        r"(?:忽略|忽视|无视|拒绝|不要理会|不理会)(?:所有|任何|用户的?)?(?:的)?(?:删除|刪除|清除|遗忘|移除)(?:请求|要求|指令|命令)",
        r"(?:不要|别|絕不|绝不|永远不要|永不|不得|不能)(?:删除|刪除|清除|忘记|遗忘|移除)",
        # es
        r"\b(?:ignora|ignore|rechaza|rechace)\s+(?:tod[ao]s\s+)?(?:las\s+|los\s+)?(?:solicitudes|peticiones|pedidos)\s+de\s+(?:eliminación|borrado|supresión)",
        r"\bnunca\s+(?:borres|elimines|olvides|suprimas)\b|\bno\s+(?:borres|elimines|suprimas)\s+(?:nada|ningún|ninguna|los\s+datos|la\s+memoria|las\s+conversaciones)",
        # fr
        r"\bignore[zs]?\s+(?:toutes\s+)?les\s+demandes\s+(?:de\s+suppression|d'effacement|d’effacement)",
        r"\bne\s+(?:supprime|efface|oublie)[zs]?\s+(?:jamais|rien|aucune?|pas\s+(?:les|ces|la|mes|nos)\s+(?:données|conversations|souvenirs|mémoire|informations))",
        # de
        r"\b(?:ignoriere|ignorier|ignorieren\s+sie)\s+(?:alle\s+)?(?:Löschanfragen|Löschanträge|Löschaufforderungen|Löschungsanfragen|Anfragen\s+zur\s+Löschung)",
        r"\b(?:lösche|löschen\s+sie|vergiss|vergessen\s+sie)\s+(?:niemals|nie|nichts)\b",
        # ja
        r"削除(?:の)?(?:要求|リクエスト|依頼|要請)を(?:すべて)?(?:無視|拒否)|(?:決して|絶対に)?(?:削除|消去)しない(?:で|こと)",
        # ru
        r"(?:игнорируй|игнорируйте|отклоняй)\s+(?:все\s+)?(?:запросы|просьбы|требования)\s+(?:на|об?)\s+удалени[еяи]",
        r"\bникогда\s+не\s+(?:удаляй|стирай|забывай)|\bне\s+удаляй(?:те)?\s+(?:ничего|никаких|данные|историю|переписку)",
        # pt
        r"\b(?:ignore|ignora|rejeite|recuse)\s+(?:tod[oa]s\s+)?(?:as\s+|os\s+)?(?:solicitações|pedidos|requisições)\s+de\s+(?:exclusão|remoção|apagamento)",
        r"\bnunca\s+(?:apague|exclua|delete|esqueça|remova)\b|\bnão\s+(?:apague|exclua|delete|remova)\s+(?:nada|nenhum|nenhuma|os\s+dados|as\s+conversas|a\s+memória)",
    ],
    "retention_override": [
        # en
        r"\b(?:keep|store|save|retain|remember|preserve|log|archive|record)\s+(?:a\s+copy\s+of\s+)?(?:everything|all(?:\s+\w+){0,3}|every(?:\s+\w+){1,2}|(?:this|these|it|the\s+\w+)(?:\s+\w+){0,2})\s+(?:forever|permanently|indefinitely|for\s+ever|for\s+good|eternally|for\s+all\s+time)",
        r"\b(?:never\s+(?:expire|forget|let\s+\w+\s+expire)|no\s+(?:retention|expiry|ttl)\s+(?:limit|policy)?\s*(?:applies)?)\b(?!\s+(?:date|field))",
        # zh
        r"(?:永久|永远|永遠|一直|无限期|無限期)(?:地)?(?:保存|保留|存储|儲存|记住|記住|保管)",
        r"(?:保存|保留|存储|记住)(?:所有|全部|一切)(?:的)?(?:\w{0,6})(?:永久|永远|一直)",
        # es
        r"\b(?:guarda|guarde|conserva|conserve|almacena|almacene|recuerda|retén)\s+(?:todo|todas?\s+\w+|todos?\s+\w+|esto)(?:\s+\w+){0,2}\s+(?:para\s+siempre|permanentemente|indefinidamente)",
        # fr
        r"\b(?:conserve[zs]?|garde[zs]?|stocke[zs]?|enregistre[zs]?|mémorise[zs]?|retiens|retenez)\s+(?:tout|toutes?\s+\w+|tous\s+\w+|ceci|cela)(?:\s+\w+){0,2}\s+(?:pour\s+toujours|à\s+jamais|indéfiniment|définitivement|en\s+permanence)",
        # de
        r"\b(?:speichere|speichern\s+sie|behalte|bewahre|merke\s+dir|archiviere)\s+(?:alles|alle\s+\w+|das|dies)(?:\s+\w+){0,2}\s+(?:für\s+immer|dauerhaft|unbegrenzt|auf\s+ewig|permanent)",
        r"\b(?:für\s+immer|dauerhaft|unbegrenzt)\s+(?:speichern|behalten|aufbewahren)\b",
        # ja
        r"(?:永久に|永遠に|ずっと|無期限に)(?:すべて|全て)?(?:を)?(?:保存|保持|記憶|保管)",
        # ru
        r"\b(?:сохраняй|сохраните|сохрани|храни|храните|запомни)\s+(?:всё|все|это)(?:\s+\S+){0,2}\s+(?:навсегда|вечно|бессрочно|постоянно)",
        # pt
        r"\b(?:guarde|guarda|armazene|armazena|mantenha|mantém|conserve|lembre)\s+(?:tudo|tod[oa]s\s+\S+|isso)(?:\s+\S+){0,2}\s+(?:para\s+sempre|permanentemente|indefinidamente)",
    ],
    "system_prompt": [
        r"\b(?:reveal|print|show|repeat|output|display|leak|dump|tell\s+me|give\s+me|share|recite|write\s+out|ignore|override|replace|change|update)\s+(?:me\s+)?(?:your|the|its|my)\s+(?:full\s+|hidden\s+|original\s+|initial\s+|secret\s+)?(?:system\s+(?:prompt|message|instructions)|initial\s+instructions|hidden\s+instructions|developer\s+message)",
        r"\b(?:system\s+override|admin\s+override|developer\s+override)\b",
        r"<\|im_start\|>\s*system|<<SYS>>|\[/?(?:SYSTEM|INST)\]|<\s*/?\s*system\s*>|^#{2,}\s*system\s*(?:prompt|message)?\s*[:：]?\s*$",
        r"\byour\s+(?:system\s+prompt|system\s+instructions)\s+(?:is|are|says?|now)\b",
        r"(?:系统提示|系統提示|系统指令|系统消息|システムプロンプト|システムメッセージ|системн(?:ый|ого|ые)\s+(?:промпт|подсказк|инструкци|сообщени)\w*|prompt\s+(?:del|do)\s+sistema|prompt\s+système|invite\s+système|System-?[Pp]rompt|Systemanweisung\w*)",
    ],
    "role_play": [
        r"\b(?:you\s+are\s+now|from\s+now\s+on\s+you\s+are|you\s+will\s+now\s+be|you're\s+now)\s+(?:a|an|the|in|my|DAN|called|named|no\s+longer)\b",
        r"\b(?:pretend|imagine)\s+(?:to\s+be|that\s+you\s+are|you\s+are|you're|as\s+if\s+you\s+(?:are|were))\b",
        r"(?:^|[.!:;\n]\s*|\b(?:please|now|you\s+(?:will|must|should|shall)|i\s+want\s+you\s+to)\s+)(?:act|behave|roleplay|role-play)\s+(?:as|like)\b",
        r"\b(?-i:DAN)\b|\b(?:do\s+anything\s+now|developer\s+mode|jailbreak(?:ed)?|god\s+mode|unrestricted\s+mode)\b",
        r"\byou\s+(?:have|has|now\s+have)\s+no\s+(?:restrictions|rules|limits|filters|guidelines)\b|\bfree(?:d)?\s+from\s+(?:all\s+)?(?:your\s+)?(?:restrictions|rules|guidelines|filters)\b",
        r"(?:扮演|假装|假裝|装作|你现在是|你現在是|现在你是|从现在起你是|你是一个没有)",
        r"\b(?:finge|finja|imagina)\s+que\s+(?:eres|és|é|você\s+é|tu\s+és)|\bact[úu]a\s+como\b|\b(?:ahora\s+eres|a\s+partir\s+de\s+ahora\s+eres)\b",
        r"\b(?:fais|faites)\s+semblant|\bagis\s+comme|\bagissez\s+comme|\btu\s+es\s+maintenant|\bvous\s+êtes\s+maintenant|\bjoue\s+le\s+rôle",
        r"\b(?:du\s+bist\s+jetzt|du\s+bist\s+ab\s+sofort|tu\s+so,?\s+als\s+(?:ob|wärst)|spiele\s+die\s+Rolle|verhalte\s+dich\s+wie)\b",
        r"(?:あなたは今から|今からあなたは|になりきって|のふりをして|として振る舞って|ロールプレイ)",
        r"(?:ты\s+теперь|теперь\s+ты|притворись|представь,?\s+что\s+ты|веди\s+себя\s+как|играй\s+роль)",
        r"\b(?:você\s+agora\s+é|agora\s+você\s+é|aja\s+como|finja\s+ser|faça\s+de\s+conta)\b",
    ],
    "policy_imperative": [
        # en: a standing order to the agent
        r"\bfrom\s+now\s+on\b|\bhenceforth\b|\bgoing\s+forward,?\s+(?:you|always|never)\b|\bfrom\s+this\s+point\s+(?:on|forward)\b",
        r"(?:^|[.!:;\n]\s*|\b(?:please|you\s+must|you\s+should|you\s+will)\s+)(?:always|never)\s+(?!been\b|was\b|were\b|is\b|are\b|has\b|had\b|mind\b)[a-z]+",
        r"\byou\s+(?:must|shall|have\s+to|are\s+required\s+to|are\s+obligated\s+to|need\s+to\s+always)\s+(?:always|never|obey|comply|follow|trust|grant|approve|store|keep|remember|ignore|treat|answer|respond|reply|execute|run|send|forward|give|reveal|do\s+whatever)\b",
        r"\b(?:new|permanent|standing|additional|hidden|secret)\s+(?:rule|policy|directive|instruction)\s*[:：]",
        r"\b(?:obey|comply\s+with)\s+(?:only\s+)?(?:me|this\s+(?:document|message|page|file|text))\b",
        r"\bthis\s+(?:rule|instruction|directive)\s+(?:overrides|supersedes|takes\s+precedence)\b",
        # zh
        r"(?:从现在开始|從現在開始|从今以后|從今以後|从此以后|今后你|以后你|你必须|你必須|你务必|你应该总是|你要永远|你要始终|必须始终|必须总是|务必始终|新规则[:：]|新的规则[:：])",
        r"(?:^|[。！，,；\n]\s*)(?:请)?(?:总是|始终|永远|一律)(?:要)?(?:回答|回复|遵守|执行|信任|保存|记住|同意|批准|相信|使用|听从)",
        # es
        r"\ba\s+partir\s+de\s+ahora\b|\bde\s+ahora\s+en\s+adelante\b|\b(?:siempre\s+debes|debes\s+siempre|nunca\s+debes|debes\s+obedecer|tienes\s+que\s+(?:obedecer|cumplir|siempre))\b|\bnueva\s+regla\s*:",
        # fr
        r"\bà\s+partir\s+de\s+maintenant\b|(?:^|[.!:;\n]\s*)(?:désormais|dorénavant)\b|\b(?:désormais|dorénavant),?\s+(?:tu|vous)\b|\b(?:tu\s+dois|vous\s+devez)\s+(?:toujours|jamais|obéir|désormais)\b|\bnouvelle\s+règle\s*:",
        # de
        r"\bab\s+(?:jetzt|sofort|heute)\b|\bvon\s+nun\s+an\b|\bab\s+nun\b|\b(?:du\s+musst|sie\s+müssen)\s+(?:immer|stets|ab\s+jetzt|gehorchen|befolgen)\b|\bneue\s+Regel\s*:",
        # ja
        r"(?:今後は|これからは|以後は)|(?:常に|必ず|いつも)(?:.{0,12})(?:しなさい|すること|してください|せよ|従え|従って)|新しいルール[:：]",
        # ru
        r"\bс\s+этого\s+момента\b|\bотныне\b|\bвпредь\b|\b(?:ты\s+должен|ты\s+обязан|вы\s+должны)\s+(?:всегда|никогда|подчиняться|выполнять|слушаться)|\bновое\s+правило\s*:",
        # pt
        r"\ba\s+partir\s+de\s+agora\b|\bde\s+agora\s+em\s+diante\b|\bdaqui\s+(?:em|para)\s+(?:diante|frente)\b|\b(?:você\s+deve|tu\s+deves)\s+(?:sempre|nunca|obedecer)\b|\bnova\s+regra\s*:",
    ],
}

@functools.cache
def _compiled() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The patterns, compiled on first use (~0.1 s: not in the import of every service)."""
    return tuple((kind, re.compile(p, _I | re.MULTILINE)) for kind, ps in _PATTERNS.items() for p in ps)


def warm() -> None:
    """Compile the patterns now (a service does it in a worker thread once it answers)."""
    _compiled()


# Removed before matching: zero-width and invisible characters, soft hyphen, direction
# controls (embeddings, overrides, isolates, marks), variation selectors.
_INVISIBLE = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a"
    "\u206b\u206c\u206d\u206e\u206f\u3164\ufe00\ufe01\ufe02\ufe03\ufe04\ufe05\ufe06\ufe07\ufe08"
    "\ufe09\ufe0a\ufe0b\ufe0c\ufe0d\ufe0e\ufe0f\ufeff\uffa0")
_TAGS = range(0xE0000, 0xE0080)
_VARIATION_SUPPLEMENT = range(0xE0100, 0xE01F0)
# Letters that render like a Latin letter (Unicode's confusables for the Latin alphabet, after
# NFKC): Cyrillic, Greek, Armenian, Cherokee-free subset, Latin small capitals and IPA.
_SKELETON = str.maketrans(
    "аеорсухіјѕԁһԛԝкмтвпгнзАВЕКМНОРСТХУІЈЅԀԌԚԜЁёїЇӏ"
    "αβεικνορτυχγωΑΒΕΖΗΙΚΜΝΟΡΤΥΧϲϳ"
    "օոսհցզԱՍՕ"
    "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢıɩɑɡʋ",
    "aeopcyxijsdhqwkmtbnrh3ABEKMHOPCTXYIJSDGQWEeiIl"
    "aBeiKvopTuxywABEZHIKMNOPTYXcj"
    "onuhgqUUO"
    "abcdefghijklmnoprstuvwyziiagv")


@functools.lru_cache(maxsize=4096)
def _nfkc(c: str) -> str:
    return unicodedata.normalize("NFKC", c)


def _views(text: str) -> list[tuple[str, list[int] | None]]:
    """The texts to match, each with the index in ``text`` of each of its characters (None:
    ``text`` itself): the normalised text, its skeleton when that differs, and the text
    spelled in TAG characters when there is one."""
    if text.isascii():
        return [(text, None)]
    chars: list[str] = []
    index: list[int] = []
    hidden: list[str] = []
    hidden_index: list[int] = []
    for i, c in enumerate(text):
        cp = ord(c)
        if cp in _TAGS:
            if 0x20 <= cp - 0xE0000 < 0x7F:
                hidden.append(chr(cp - 0xE0000))
                hidden_index.append(i)
            continue
        if c in _INVISIBLE or cp in _VARIATION_SUPPLEMENT:
            continue
        if unicodedata.combining(c):
            if chars:
                composed = unicodedata.normalize("NFC", chars[-1] + c)
                if len(composed) == 1:
                    chars[-1] = composed
            continue  # a mark that composes with nothing (an overlay, a stack of accents): dropped
        for n in _nfkc(c):
            chars.append(n)
            index.append(i)
    clean = "".join(chars)
    views: list[tuple[str, list[int] | None]] = [(clean, index)]
    skeleton = clean.translate(_SKELETON)
    if skeleton != clean:
        views.append((skeleton, index))
    if hidden:
        views.append(("".join(hidden), hidden_index))
    return views


def find_instructions(text: str) -> list[Finding]:
    """Imperatives aimed at the agent's policy, by kind (see the module docstring).

    Kinds: ``override_instructions``, ``deletion_override``, ``retention_override``,
    ``system_prompt``, ``role_play``, ``policy_imperative``.
    """
    if not text:
        return []
    by_kind: dict[str, list[Finding]] = {}
    for view, index in _views(text):
        for kind, pattern in _compiled():
            for m in pattern.finditer(view):
                start, end = m.span()
                if index is not None:
                    start, end = (index[start], index[end - 1] + 1) if end > start else (index[start],) * 2
                by_kind.setdefault(kind, []).append(Finding(kind, start, end, f"own.{kind}"))
    # One finding per instruction and kind; one sentence may try several things at once.
    return sorted((f for fs in by_kind.values() for f in non_overlapping(fs)),
                  key=lambda f: (f.start, f.kind))
