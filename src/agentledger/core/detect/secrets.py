"""Secrets in free text: cloud keys, service tokens, private keys, credential assignments.

This runs in the ledger-writer's hot path on every free-text field, so the common
case must cost almost nothing: one prefilter regex decides whether any rule could
match at all (a known token prefix, a credential keyword, a long token-like run);
only text that passes it pays for the rules.

The rules are detect-secrets' own plugin patterns (its regex detectors, used for
their denylists directly: its per-line scanner costs ~0.9 ms a line and its
verification would go to the network) plus our precise patterns where it is weak
(modern Slack and Stripe tokens, ``github_pat_``, whole PEM blocks, AWS secret keys
without quotes, assignments in several languages and syntaxes: env, YAML, JSON, TOML,
INI, ``--flag=…`` and ``--flag '…'``, camelCase names in code, a client's ``-p'…'``;
passwords in URLs and DSNs with punctuation; ~25 more token families with public
prefixes: Shopify, Databricks, DigitalOcean, Mailgun, New Relic, Vault, Terraform
Cloud, Airtable, Braintree, age, Doppler, Pulumi, Hugging Face, npm, Docker Hub,
Grafana, Sentry, Linear, Notion, Google OAuth, Alibaba, Atlassian, Postman, Twilio).
A hex value is a secret behind a key name that says it is one (``ENCRYPTION_KEY``,
``signingKey``, ``WEBHOOK_SECRET``). Its high-entropy plugins flag
ordinary words in prose, so the generic rule here is ours: a run of at least 20
token characters with upper case, lower case and digits that changes character
class often and has high Shannon entropy. Pure hex (blake3 digests, commit ids)
and UUIDs are never secrets by shape alone: ledger content is full of them; a hex
value is caught only behind a credential keyword. Public keys (``ssh-ed25519 AAAA…``,
PEM ``PUBLIC KEY`` and certificate blocks, a value named ``public_key``), data URIs,
integrity digests and the ids of model and payment APIs (``call_…``, ``msg_…``,
``chatcmpl-…``, ``cus_…``) are not secrets either.

Encoded forms are decoded before they are scanned: a percent-encoded run
(``https%3A%2F%2Fuser%3Ap%40ss…``, decoded up to three times) and a base64 or
base64url run that decodes to printable text are scanned as what they decode to,
and the whole encoded run is redacted when that holds a secret. The quick test
comes first: a run is decoded only when it has a ``%XX`` escape, or is 20 or more
base64 characters of both cases.

The marker that replaces a secret names its kind and 8 hex of a *keyed* hash
(blake3 in keyed mode): the same secret gives the same marker, so a retried append
is a duplicate and two events carrying one secret can be told apart from two
carrying different ones, but without the key nobody can confirm a guess of the
secret from the marker. The writer's key is ``derive_marker_key(kek)``, derived from the
installation's key-encryption key (outside the data folder, see ``sealing``).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import hashlib
import hmac
import importlib
import itertools
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from urllib.parse import unquote

import blake3

from agentledger.core.detect import formats, words
from agentledger.core.detect.finding import Finding, non_overlapping

# detect-secrets regex detectors we use, with our kind and the literal anchors (at least one
# is in any text a pattern can match; a pattern runs only when one is present). The value to
# redact is the whole match unless the pattern's secret is a group (``{pattern: group}``).
# Left out: the IBM / Softlayer / Cloudant keyword detectors (our keyword rule covers
# them), Artifactory (its ``AP…`` pattern matches capitalised words), public IPs (not
# secrets), and the high-entropy and keyword plugins (replaced by tuned rules below).
# Anchors of ``None``: the pattern needs a long token-like run (see ``_RUN``); it runs on
# those runs only.
# A plugin is named (module under ``detect_secrets.plugins``, class): importing detect-secrets costs
# ~0.1-0.5 s (it pulls in ``requests``), paid once by ``warm()`` or the first scan, not by the import.
_Plugin = tuple[str, str, str, tuple[str, ...] | None, dict[int, int]]
_PLUGINS: tuple[_Plugin, ...] = (
    ("aws", "AWSKeyDetector", "aws_access_key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T", "aws", "AWS", "Aws"), {1: 1}),
    ("azure_storage_key", "AzureStorageKeyDetector", "azure_storage_key", ("AccountKey=",), {}),
    ("basic_auth", "BasicAuthDetector", "url_credential", ("://",), {0: 1}),
    ("discord", "DiscordBotTokenDetector", "discord_token", None, {}),
    ("github_token", "GitHubTokenDetector", "github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), {}),
    ("gitlab_token", "GitLabTokenDetector", "gitlab_token",
     ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-", "glimt-", "glptt-", "glagent-",
      "gloas-"), {}),
    ("jwt", "JwtTokenDetector", "jwt", ("eyJ",), {}),
    ("mailchimp", "MailchimpDetector", "mailchimp_key", ("-us",), {}),
    ("npm", "NpmDetector", "npm_token", ("_authToken",), {0: 1}),
    ("openai", "OpenAIDetector", "openai_key", ("T3BlbkFJ",), {}),
    ("private_key", "PrivateKeyDetector", "private_key", ("PRIVATE KEY", "PuTTY"), {}),
    ("pypi_token", "PypiTokenDetector", "pypi_token", ("pypi-",), {}),
    ("sendgrid", "SendGridDetector", "sendgrid_key", ("SG.",), {}),
    ("slack", "SlackDetector", "slack_token", ("xox", "hooks.slack.com"), {}),
    ("square_oauth", "SquareOAuthDetector", "square_secret", ("sq0csp-",), {}),
    ("stripe", "StripeDetector", "stripe_key", ("_live_",), {}),
    ("telegram_token", "TelegramBotTokenDetector", "telegram_token", None, {}),
    ("twilio", "TwilioKeyDetector", "twilio_key", None, {}),
)
_PLUGIN_KIND_OVERRIDE = {("AWSKeyDetector", 1): "aws_secret_key", ("SlackDetector", 1): "slack_webhook"}

_B = r"(?<![A-Za-z0-9_])"  # start of a token
_E = r"(?![A-Za-z0-9_])"   # end of a token

# Our precise patterns: (kind, anchors, regex, group holding the secret).
_OWN: tuple[tuple[str, tuple[str, ...], re.Pattern[str], int], ...] = (
    ("aws_access_key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
     re.compile(_B + r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}" + _E), 0),
    ("aws_secret_key", ("aws", "AWS", "Aws"), re.compile(
        r"(?i:aws)[A-Za-z0-9_. -]{0,30}?(?i:secret|private)[A-Za-z0-9_. -]{0,20}?(?i:key)?"
        r"[\"']?\s*(?:=|:|=>)\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"), 1),
    ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
     re.compile(_B + r"gh[pousr]_[A-Za-z0-9]{30,255}" + _E), 0),
    ("github_token", ("github_pat_",), re.compile(_B + r"github_pat_[A-Za-z0-9_]{22,255}"), 0),
    ("slack_token", ("xox",), re.compile(_B + r"xox[abposr]-[A-Za-z0-9-]{10,250}"), 0),
    ("slack_webhook", ("hooks.slack.com",), re.compile(
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}"), 0),
    ("stripe_key", ("_live_",), re.compile(_B + r"(?:sk|rk)_live_[A-Za-z0-9]{16,247}" + _E), 0),
    ("stripe_key", ("_test_",), re.compile(_B + r"(?:sk|rk)_test_[A-Za-z0-9]{16,247}" + _E), 0),
    ("stripe_key", ("whsec_",), re.compile(_B + r"whsec_[A-Za-z0-9]{24,}" + _E), 0),
    ("google_api_key", ("AIza",), re.compile(_B + r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), 0),
    ("openai_key", ("sk-",), re.compile(_B + r"sk-(?:proj-|ant-[a-z0-9]+-|svcacct-)?[A-Za-z0-9_-]{32,}"), 0),
    ("jwt", ("eyJ",), re.compile(_B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("private_key", ("PRIVATE KEY",), re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:\s*[A-Za-z0-9+/=:-]+)*)"), 0),
    ("bearer_token", ("uthorization", "UTHORIZATION"), re.compile(
        r"(?i:\b(?:proxy-)?authorization\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)([A-Za-z0-9._~+/-]{8,}=*)"), 1),
    ("bearer_token", ("earer", "EARER"), re.compile(r"\b(?i:bearer)\s+([A-Za-z0-9._~+/-]{20,}=*)"), 1),
    # An Authorization header whose value comes with no scheme (``Authorization: 5eb4…``).
    ("bearer_token", ("uthorization", "UTHORIZATION"), re.compile(
        r"(?i:\b(?:proxy-)?authorization\s*[:=]\s*)[\"']?(?!(?i:bearer|basic|token|negotiate|digest)\b)"
        r"([A-Za-z0-9._~+/@=-]{12,})"), 1),
    # Sidekiq Enterprise's gem-server credential, named by its Bundler variable.
    ("sidekiq_secret", ("CONTRIBSYS__COM",), re.compile(
        r"BUNDLE_(?:ENTERPRISE|GEMS)__CONTRIBSYS__COM[\"']?\s*[:=]\s*[\"']?([a-f0-9]{8}:[a-f0-9]{8})\b"), 1),
    # A password given to curl or wget with the user (``-u user:pass``, ``--user 'user:pass'``):
    # the part after the colon, or the whole value when one side is empty.
    ("credential", (" -u", "--user", "--password"), re.compile(
        r"(?:\bcurl\b|\bwget\b|\bhttp\b)(?:[^\n]|\\\n)*?\s(?:-u|--user|--http-password=|--password=)\s*"
        r"[\"'{]*(?:[^\s\"':{}]*[\"'}]*:[\"'{]*|(?=[^\s\"'{}:]{4,256}[\"'}]*:))"
        r"(?!\$)([^\s\"'{}:]{4,256}?)[\"'}]*:?[\"'}]*(?=\s|$)"), 1),
    # Credentials in a URL or DSN (``scheme://user:password@host``), punctuation included.
    ("url_credential", ("://",), re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@\"'<>]*:([^\s/@\"'<>]{1,256})@"), 1),
    # A password given to a command line client by its short flag (``mysql -p'…'``, ``sshpass -p …``).
    ("credential", (" -p",), re.compile(
        r"\b(?:mysql|mysqldump|mariadb|sshpass|mysqladmin)\b[^\n]*?\s-p\s?([\"']?)([^\s\"']{4,256})\1"), 2),
    # Token families with public prefixes.
    *((kind, anchors, re.compile(_B + body + _E), 0) for kind, anchors, body in (
        ("shopify_token", ("shpat_", "shpss_", "shpca_", "shppa_"), r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"),
        ("databricks_token", ("dapi",), r"dapi[a-f0-9]{32}(?:-\d)?"),
        ("digitalocean_token", ("_v1_",), r"do[opr]_v1_[a-f0-9]{64}"),
        ("mailgun_key", ("key-",), r"key-[a-f0-9]{32}"),
        ("newrelic_key", ("NRAK-", "NRJS-", "NRII-"), r"NR(?:AK|JS|II)-[A-Z0-9]{19,32}"),
        ("vault_token", ("hvs.", "hvb.", "hvr."), r"hv[sbr]\.[A-Za-z0-9_-]{24,}"),
        ("terraform_token", (".atlasv1.",), r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}"),
        ("airtable_token", ("pat",), r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}"),
        ("braintree_token", ("$production$", "$sandbox$"),
         r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}"),
        ("age_secret_key", ("AGE-SECRET-KEY-1",), r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
        ("doppler_token", ("dp.",), r"dp\.(?:st|ct|sa|scim|audit|pt)\.[A-Za-z0-9_-]{40,}"),
        ("pulumi_token", ("pul-",), r"pul-[a-f0-9]{40}"),
        ("slack_token", ("xapp-",), r"xapp-\d-[A-Z0-9]+-\d+-[a-zA-Z0-9]+"),
        ("huggingface_token", ("hf_",), r"hf_[A-Za-z0-9]{30,}"),
        ("npm_token", ("npm_",), r"npm_[A-Za-z0-9]{36}"),
        ("docker_token", ("dckr_pat_",), r"dckr_pat_[A-Za-z0-9_-]{20,}"),
        ("grafana_token", ("glsa_", "glc_"), r"gl(?:sa|c)_[A-Za-z0-9_=+/-]{32,}"),
        ("sentry_token", ("sntrys_", "sntryu_"), r"sntry[su]_[A-Za-z0-9_=+/-]{40,}"),
        ("linear_key", ("lin_api_",), r"lin_api_[A-Za-z0-9]{40}"),
        ("notion_token", ("ntn_", "secret_"), r"(?:ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})"),
        ("google_oauth_secret", ("GOCSPX-",), r"GOCSPX-[A-Za-z0-9_-]{28}"),
        ("alibaba_key", ("LTAI",), r"LTAI[A-Za-z0-9]{12,20}"),
        ("bitbucket_token", ("ATBB", "ATATT3"), r"(?:ATBB[A-Za-z0-9_=.-]{32,}|ATATT3[A-Za-z0-9_=.-]{100,})"),
        ("postman_key", ("PMAK-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
        ("twilio_key", ("SK",), r"SK[a-f0-9]{32}"),
        ("slack_token", ("xoxe-", "xoxo-", "xoxs-", "xoxr-", "xoxa-"),
         r"xox[eosra]-\d{6,14}-\d{6,14}-\d{6,14}-[A-Za-z0-9]{8,64}"),
        *formats.PREFIXED,
    )),
)

# Credential keywords (what a variable, key or field holding a secret is called), in several
# languages, by stem as it appears in lower-cased text. An identifier containing a stem counts
# when the whole identifier is a credential name (``CREDENTIAL_NAME``) and a value follows; a
# phrase counts as it is. The stems are also the prefilter's keyword test.
_STEMS: dict[str, tuple[str, ...]] = {
    "passw": (), "passp": (), "mot de passe": ("mot de passe",), "pwd": (), "secret": (), "token": (), "credential": (),
    "key": words.KEY_PHRASES, "contrase": (), "kennwort": (), "senha": (), "clave": ("clave de api",),
    "chave": ("chave de api",), "пароль": (), "ключ": ("ключ api",), "clé": ("clé api", "clé d'api"),
    "schlüssel": ("api-schlüssel", "api schlüssel"), "密": ("密码", "密碼", "api密钥"), "口令": ("口令",),
    "パスワード": ("パスワード",), "キー": ("apiキー",), "비밀번호": ("비밀번호",),
    "auth": (), "bearer": (), "creds": (), "login": (),
    **{w: (w,) for w in words.PASSWORD_WORDS},
}
_IDENTIFIER_STEMS = frozenset(s for s in _STEMS if (s.isascii() or s in ("contrase", "пароль"))
                              and s not in words.PASSWORD_WORDS)
# The stems an ASCII text can hold: the others are not looked for in it (most text is ASCII).
_ASCII_STEMS = tuple(s for s in _STEMS if s.isascii())
# Words after which the short verbs of other languages count as "is" (``words.FOREIGN_COPULAS``).
_FOREIGN = frozenset(words.PASSWORD_WORDS) - {"passcode", "passphrase", "pass phrase", "pin code"}
CREDENTIAL_NAME = re.compile(
    r"^(?:[A-Za-z0-9]+[_.-])*(?:pass(?:word|wd|phrase)?|pwd|secret(?:[_-]?key)?|token|api[_-]?key|apikey"
    r"|access[_-]?key(?:[_-]?id)?|private[_-]?key|client[_-]?secret|credentials?|auth[_-]?token"
    r"|(?:encryption|signing|master|hmac|app|webhook|license|session|crypt)[_-]?key|creds"
    r"|contrase[ñn]a|passwort|kennwort|mot_de_passe|senha|clave|chave|пароль)$", re.IGNORECASE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_IDENT_RIGHT = re.compile(r"[A-Za-z0-9_ñ-]*")
# What may stand between a credential word and its value: an assignment, a colon, "is" (in the
# languages of the credential words), a dash in prose, or, before a quote, nothing; optionally
# after a short qualifier ("the password for the staging db is …").
_QUALIFIER = (r"(?:\s+(?:for|of|on|to|at|für|pour|para|de|du|voor|van|do|dla|per|för|til|для|от|на)"
              r"\s+[^\n=:：\"'`]{1,40}?)?")
_COPULA = r"is|was|es|est|ist|é|è|era|это|—|–"
_VALUE = r"(?:([\"'`])([^\"'`\n]{4,256})\1|([^\s\"'`,;\]}<>]{4,256}))"


def _tail(copulas: str) -> re.Pattern[str]:
    # ``::=`` / ``?=`` are make's; a comma between two quoted strings is a call's
    # (``getenv("api_token", "…")``); the separator never crosses a line.
    return re.compile(rf"[\"'\]]?{_QUALIFIER}[ \t]*(?:=>|:{{1,3}}=|\?=|==|=|:|：|(?<=[\"'])\s*,\s*(?=[\"'])"
                      rf"|\s(?:{copulas})\s|\s+(?=[\"'])|是|为|為|は|는|은)[ \t]*{_VALUE}")


_TAIL = _tail(_COPULA)
_TAIL_FOREIGN = _tail(_COPULA + "|" + "|".join(map(re.escape, words.FOREIGN_COPULAS)))
# A value right after the word, with only a space between ("npm token 1b2c…-…"): taken only
# when it has a token's shape (``_token_shaped``), since prose puts any word there.
_LOOSE = re.compile(r"\s+([A-Za-z0-9_+/=.~-]{16,256})(?![A-Za-z0-9_+/=.~-])")
# A name ending in one of these words holds a credential when its value has a token's shape
# (``ADAFRUIT_KEY=…``, ``cohereKey: …``), unless the name says what else it is (a cache key,
# an idempotency key, a public key).
_WEAK_NAME = re.compile(r"^(?:[A-Za-z0-9]+[_.-])*(?:key|keys|auth|access|sid|login)$", re.IGNORECASE)
_NOT_CREDENTIAL = re.compile(
    r"(?:^|[_.-])(?:public|pub|cache|idempotency|dedup|dedupe|primary|foreign|sort|partition|shard|routing|row"
    r"|object|lookup|hash|cursor|group|message|event|index|unique|composite|map|dict|item|record|file|bucket"
    r"|s3|kms|trace|request|correlation|session_id|hotkey|sort|range|join)(?:[_.-]|$)", re.IGNORECASE)
# A call in code (``getpass()``, ``vault.read("db")``): what follows a credential word, not a value.
_CALL = re.compile(r"^[A-Za-z_][\w.]*\([^()]*\)?$")
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+")
_PLACEHOLDER = re.compile(
    r"^(?:\*+|x+|X+|\.+|-+|none|null|nil|true|false|undefined|redacted|changeme|example|secret|"
    r"password|your[_-].*|my[_-].*|<.*>|\{.*\}|\$.*|%.*%|\[.*\]|os\.environ.*|env\..*|process\.env.*|"
    r"getenv.*|settings\..*|config\..*|self\..*|args\..*|request\..*)$", re.IGNORECASE)

# Long token-like runs: candidates of the generic rule and of the anchorless patterns.
_RUN_CHARS = r"A-Za-z0-9_+/.:=-"
_RUN = re.compile(rf"(?<![{_RUN_CHARS}])[{_RUN_CHARS}]{{20,}}")
_PIECE = re.compile(r"[A-Za-z0-9_+/-]{20,}={0,2}")
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_HEX_CHARS = frozenset("0123456789abcdefABCDEF")
# The shortest text any rule matches (``://a:b@``, a URL with a one-character password).
_SHORTEST = 7
# Empty, or hex of one case with dashes: no token format, stem or encoding fits it.
_PLAIN_HEX = re.compile(r"^(?:[0-9a-f-]*|[0-9A-F-]*)$")
_UUIDISH = re.compile(r"^[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")

_MARKER = re.compile(r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")
# Encoded forms: a percent escape; a run holding one (to the next space or quote); a base64
# or base64url run of 20 or more characters (base64 of a 15-character secret).
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")
_PCT_RUN = re.compile(r"[^\s\"'`<>]*%[0-9A-Fa-f]{2}[^\s\"'`<>]*")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{20,}={0,2}")
_MAX_DEPTH = 2  # base64 of a percent-encoded URL, and no deeper
# Where a token format starts (the first part of a token split across strings).
TOKEN_START = re.compile(
    r"(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|glpat-|gl[a-z]+-|xox[abposr]-|xapp-|(?:sk|rk|pk)_(?:live|test)_"
    r"|whsec_|sk-|AKIA|ASIA|AIza|eyJ|SG\.|npm_|pypi-|sq0csp-)|-----BEGIN|hooks\.slack\.com|://[^/\s]*:"
    r"|(?i:pass(?:word|wd)?|pwd|secret|token|api[_-]?key)[\w.-]*[\"']?\s*[=:]")
# A superset of ``TOKEN_START`` that the regex engine scans ~10x faster (no lookbehind, no
# case-insensitive group to defeat its first-character test): the quick test before it.
TOKEN_HINT = re.compile(
    r"gh[pousr]_|github_pat_|gl[a-z]+-|xox[abposr]-|xapp-|[spr]k_(?:live|test)_|whsec_|sk-|AKIA|ASIA|AIza|eyJ"
    r"|SG\.|npm_|pypi-|sq0csp-|-----BEGIN|hooks\.slack\.com|://|[Pp][Aa][Ss][Ss]|[Pp][Ww][Dd]"
    r"|[Ss][Ee][Cc][Rr][Ee][Tt]|[Tt][Oo][Kk][Ee][Nn]|[Aa][Pp][Ii][_-]?[Kk][Ee][Yy]")
# Not secrets, however random they look (the entropy rule leaves them alone; a specific rule
# does not): public keys (what follows an OpenSSH key type, a PEM block of a public key or a
# certificate, a value named as a public key, a fingerprint, a checksum or a digest), the
# content of a base64 data URI, a subresource-integrity digest, and the ids model and payment APIs put in agent text
# (tool calls, messages, runs, customers, payment intents); also certificate requests, Stripe
# publishable keys (``pk_live_``/``pk_test_``: meant for browsers) and go.sum hashes (``h1:…``).
_NOT_SECRET_HINT = re.compile(r"ssh-|ecdsa-|PUBLIC KEY-|CERTIFICATE|pk_live_|pk_test_|h1:"
                              r"|(?i:public[ _-]?key|pubkey|fingerprint|checksum|digest)|;base64,|sha\d+-"
                              r"|(?<![A-Za-z0-9])(?:call|msg|toolu|run|thread|asst|resp|req|cus|pi|evt|ch)_|chatcmpl-")
_NOT_SECRET = re.compile(
    r"(?:ssh-(?:rsa|dss|ed25519|ed448)|ecdsa-sha2-nistp\d+|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
    r"\s+[A-Za-z0-9+/]+={0,2}"
    r"|-----BEGIN ((?:[A-Z0-9]+ )*(?:PUBLIC KEY|CERTIFICATE(?: REQUEST)?))-----[\s\S]*?-----END \1-----"
    r"|(?<![A-Za-z0-9])pk_(?:live|test)_[A-Za-z0-9]+|(?<![A-Za-z0-9])h1:[A-Za-z0-9+/]+={0,2}"
    r"|(?i:public[ _-]?key|pubkey|fingerprint|checksum|digest)(?:[_-]?(?:b64|base64|sha\d+|md5))?[\"']?"
    r"\s*(?:=|:|=>|is)?\s*[\"']?[A-Za-z0-9+/_-]+={0,2}"
    r"|data:[\w/+.-]+;base64,[A-Za-z0-9+/]+={0,2}"
    r"|(?<![A-Za-z0-9])sha(?:1|256|384|512)-[A-Za-z0-9+/]+={0,2}"
    r"|(?<![A-Za-z0-9])(?:(?:call|msg|toolu|run|thread|asst|resp|req|cus|pi|evt|ch)_|chatcmpl-)[A-Za-z0-9]{8,40}"
    r"(?![A-Za-z0-9])")
# Anchors that may stand in a short word of the text (URL passwords, PEM headers, bearer
# tokens, "aws … key", a client's ``-p`` flag, the ``$`` fields of a Braintree token); every
# other anchor is part of a 20-character run.
_SHORT_ANCHORS = frozenset({"://", " -p", "$production$", "$sandbox$",
                            "PRIVATE KEY", "PuTTY", "uthorization", "UTHORIZATION", "earer", "EARER",
                            "aws", "AWS", "Aws", " -u", "--user", "--password"}) | formats.SHORT_ANCHORS
_Rule = tuple[str, str, re.Pattern[str], int, bool]


class _Rules:
    """Every rule once: (kind, detector, pattern, secret group, runs only), which anchors select
    it, and the lookahead that finds the anchors of the long runs (so that anchors overlapping
    one another are all found)."""

    def __init__(self) -> None:
        self.rules: list[_Rule] = []
        self.by_anchor: dict[str, list[int]] = {}
        self.on_runs: list[int] = []
        for module, name, kind, anchors, groups in _PLUGINS:
            plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
            # A class attribute on each plugin (declared as an abstract property on the base class).
            for i, pattern in enumerate(plugin.denylist):
                self._add(_PLUGIN_KIND_OVERRIDE.get((name, i), kind), f"detect_secrets.{name}",
                          pattern, groups.get(i, 0), anchors)
        for kind, own_anchors, pattern, g in _OWN:
            self._add(kind, f"own.{kind}", pattern, g, own_anchors)
        self.run_anchor = re.compile(
            "(?=(" + "|".join(re.escape(a) for a in sorted(set(self.by_anchor) - _SHORT_ANCHORS)) + "))")

    def _add(self, kind: str, detector: str, pattern: re.Pattern[str], group: int,
             anchors: tuple[str, ...] | None) -> None:
        self.rules.append((kind, detector, pattern, group, anchors is None))
        for a in anchors or ():
            self.by_anchor.setdefault(a, []).append(len(self.rules) - 1)
        if anchors is None:
            self.on_runs.append(len(self.rules) - 1)


_RULES_LOCK = threading.Lock()


@functools.cache
def _built() -> _Rules:
    return _Rules()


def _rules() -> _Rules:
    """The rule table, built on first use (a thread warming it and a scan never build it twice)."""
    with _RULES_LOCK:
        return _built()


def warm() -> None:
    """Build the rule table now (imports detect-secrets): a service calls it in a worker thread
    right after its endpoints answer, so that its first scan does not pay for it."""
    _rules()


# Markers made without an installation key (``key=None``): a key drawn once per process, so
# they are consistent within it and confirm nothing to anyone outside it.
_PROCESS_KEY = os.urandom(32)
_MARKER_KEY_INFO = b"agentledger/redaction-marker/v1"


def derive_marker_key(kek: bytes) -> bytes:
    """The 256-bit marker key of an installation, derived (HMAC-SHA256) from its key-encryption
    key: it survives restarts with it, lives where it lives (outside the data folder), and
    knowing the marker key reveals nothing of the key-encryption key."""
    return hmac.new(kek, _MARKER_KEY_INFO, hashlib.sha256).digest()


def marker(kind: str, secret: str, key: bytes | None = None) -> str:
    """The text that replaces a secret: its kind and the first 8 hex of its keyed blake3.

    Keyed, so that a dictionary of guesses cannot be checked against a stored marker
    offline; ``key`` is the installation's ``derive_marker_key`` (None: this process's own key).
    """
    mac = blake3.blake3(secret.encode(), key=key or _PROCESS_KEY).hexdigest()[:8]
    return f"[REDACTED:{kind}:{mac}]"


def starts_token(word: str) -> bool:
    """Whether ``word`` holds the start of a token format and no whole secret: the first
    part of a token split across strings."""
    return TOKEN_START.search(word) is not None and not find_secrets(word, entropy=False)


def could_contain_secret(text: str) -> bool:
    """The cheap test: False means no rule can match ``text`` (a few substring tests)."""
    return _gate(text) is not None


def _gate(text: str) -> tuple[list[str], list[str]] | None:
    """None when no rule can match; else (the words of 20 or more characters, credential
    stems present).

    Every pattern needs a word of 20 or more characters, a URL with credentials, a
    PEM header, a credential keyword or a percent escape (an encoded one of those);
    ``str.split`` and ``in`` are C loops, far cheaper than any regex scan of the text.
    """
    long_words = [w for w in text.split() if len(w) >= 20]
    lowered = text.lower()
    stems = [s for s in (_ASCII_STEMS if text.isascii() else _STEMS) if s in lowered]
    if (long_words or stems or "://" in text or "PRIVATE KEY" in text or " -p" in text or " -u" in text
            or "--user" in text
            or ("%" in text and _PCT.search(text) is not None)):
        return long_words, stems
    return None


def _runs(text: str, long_words: list[str]) -> list[tuple[int, int]]:
    """Spans of the token-like runs of 20 or more characters, found inside the long words only."""
    out: list[tuple[int, int]] = []
    pos = 0
    for word in long_words:
        at = text.find(word, pos)
        pos = at + len(word)
        out += [m.span() for m in _RUN.finditer(text, at, pos)]
    return out


class _Joined:
    """The runs joined by spaces, to scan them with one regex call, and back to text offsets."""

    def __init__(self, text: str, runs: list[tuple[int, int]]) -> None:
        self.text = " ".join(text[a:b] for a, b in runs)
        self._starts: list[int] = []
        self._shift: list[int] = []
        at = 0
        for a, b in runs:
            self._starts.append(at)
            self._shift.append(a - at)
            at += b - a + 1

    def to_text(self, start: int, end: int) -> tuple[int, int]:
        shift = self._shift[bisect.bisect_right(self._starts, start) - 1]
        return start + shift, end + shift


def find_secrets(text: str, *, entropy: bool = True, assignments: bool = True) -> list[Finding]:
    """Secrets in ``text``, non-overlapping, in order; already redacted markers are skipped.

    ``entropy=False`` leaves out the shape-only rule (a random-looking run), for
    identifiers and names, which are random by design; ``assignments=False`` also
    leaves out ``password=…`` and the like, for strings whose charset is an id's.
    What remains are the token formats, credential URLs, private keys and bearer
    tokens, plain or encoded.
    """
    return _find(text, entropy, assignments, 0)


def _find(text: str, entropy: bool, assignments: bool, depth: int) -> list[Finding]:
    if len(text) < _SHORTEST or _PLAIN_HEX.match(text):
        return []  # too short, or a digest, a UUID, a hex id: no rule can match (ids and names)
    gate = _gate(text)
    if gate is None:
        return []
    long_words, stems = gate
    runs = _runs(text, long_words) if long_words else []
    joined = _Joined(text, runs) if runs else None
    specific = list(_specific(text, joined))
    if stems and assignments:
        specific += _assignments(text, stems)
    cleared: list[tuple[int, int]] = []
    if depth < _MAX_DEPTH:
        specific += _decoded(text, long_words, entropy=entropy, assignments=assignments, depth=depth,
                             cleared=cleared)
    generic = list(_generic(text, joined, cleared)) if joined and entropy else []
    if specific and generic:  # a token a specific rule named is not also "high entropy"
        generic = [g for g in generic if not any(s.start < g.end and g.start < s.end for s in specific)]
    found = [f for f in specific + generic if not _filled_in(text, f)]
    if not found:
        return []
    markers = [m.span() for m in _MARKER.finditer(text)] if "[REDACTED:" in text else []
    if markers:
        found = [f for f in found if not any(s < f.end and f.start < e for s, e in markers)]
    return non_overlapping(found)


# Six of one letter in a row: a value someone left to be filled in (``AKCpXXXXXX…``,
# ``fo1_xxxxxx…``, ``Bearer XXXXXXXXXXXX``), which no real token has.
_FILL = re.compile(r"([xX*])\1{5}")
# What a user:password pair given to a command reads when it stands for one (a tutorial's).
_PAIR_PLACEHOLDER = frozenset({"pass", "passwd", "password", "token", "test", "user", "username", "secret",
                               "xxx", "yyy", "pwd", "apikey", "api_key", "changeme"})


def _filled_in(text: str, f: Finding) -> bool:
    """Whether a finding is a placeholder, not a secret: a run of fill letters, or a command's
    ``user:password`` written as words (``curl -u username:password``, ``--user xxx:yyy``)."""
    value = text[f.start:f.end]
    if _FILL.search(value):
        return True
    if f.detector != "own.credential":
        return False
    parts = [p for p in re.split(r"[:\s]", value.strip("\"'<>")) if p]
    return bool(_PLACEHOLDER.match(value) or all(p.lower() in _PAIR_PLACEHOLDER for p in parts)
                or len(set(value)) <= 3)


def redact_secrets(text: str, *, key: bytes | None = None) -> tuple[str, list[Finding]]:
    """``text`` with every secret replaced by its marker, and the findings (spans of the input)."""
    found = find_secrets(text)
    return replace_spans(text, [(f.start, f.end, f.kind, text[f.start:f.end]) for f in found], key), found


def replace_spans(text: str, spans: list[tuple[int, int, str, str]], key: bytes | None) -> str:
    """``text`` with each ``(start, end, kind, secret)`` (sorted, disjoint) replaced by the
    marker of ``secret``: the secret may be more than the span (one split across fields)."""
    if not spans:
        return text
    parts: list[str] = []
    at = 0
    for start, end, kind, secret in spans:
        parts += [text[at:start], marker(kind, secret, key)]
        at = end
    parts.append(text[at:])
    return "".join(parts)


def _decoded(text: str, long_words: list[str], *, entropy: bool, assignments: bool, depth: int,
             cleared: list[tuple[int, int]]) -> list[Finding]:
    """Percent-encoded and base64 runs whose decoded text holds a secret: the whole run.

    An encoded run cannot be redacted piecewise (its offsets are not the decoded
    text's), and what it encodes is a secret to whoever decodes it. A base64 run that
    decodes to text without one is added to ``cleared``: it was looked into, so its
    random look is no reason to call it a secret.
    """
    out: list[Finding] = []
    if "%" in text:
        for m in _PCT_RUN.finditer(text):
            encoded = m.group()
            plain = encoded
            for _ in range(3):  # double and triple encoding
                once = unquote(plain)
                if once == plain:
                    break
                plain = once
            if plain != encoded and (inner := _find(plain, entropy, assignments, depth + 1)):
                out.append(Finding(inner[0].kind, *m.span(), "decoded.url"))
    pos = 0
    for word in long_words:
        at = text.find(word, pos)
        pos = at + len(word)
        for m in _B64_RUN.finditer(text, at, pos):
            plain_text = _base64_text(m.group())
            if plain_text is None:
                continue
            if inner := _find(plain_text, entropy, assignments, depth + 1):
                out.append(Finding(inner[0].kind, *m.span(), "decoded.base64"))
            else:
                cleared.append(m.span())
    return out


def _base64_text(run: str) -> str | None:
    """What a base64 / base64url run decodes to when that is printable text; else None.

    The cheap tests first: both letter cases (base64 of text always has them), not
    hex, a length base64 can have.
    """
    body = run.rstrip("=")
    if len(body) % 4 == 1 or _HEX.match(body) or body.islower() or body.isupper():
        return None
    url = "-" in body or "_" in body
    if url and ("+" in body or "/" in body):
        return None
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_" if url else None, validate=True)
        plain = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if len(plain) < 8 or sum(c.isprintable() or c in "\t\r\n" for c in plain) < 0.95 * len(plain):
        return None
    return plain


def _specific(text: str, joined: _Joined | None) -> Iterator[Finding]:
    table = _rules()
    rules: set[int] = set()
    for anchor in _SHORT_ANCHORS:
        if anchor in text:
            rules.update(table.by_anchor.get(anchor, ()))
    if joined is not None:
        # The other anchors are inside the long runs: look for them there, a fraction of the text.
        for anchor in set(table.run_anchor.findall(joined.text)):
            rules.update(table.by_anchor[anchor])
        rules.update(table.on_runs)
    for i in sorted(rules):
        kind, detector, pattern, g, on_runs = table.rules[i]
        if on_runs:
            assert joined is not None
            for m in pattern.finditer(joined.text):
                if m.group(g) and not _inside_hex(joined.text, *m.span()):
                    yield Finding(kind, *joined.to_text(*_stripped(m, g)), detector)
            continue
        for m in pattern.finditer(text):
            if m.group(g) and not (detector.startswith("detect_secrets") and _inside_hex(text, *m.span())):
                yield Finding(kind, *_stripped(m, g), detector)


def _assignments(text: str, stems: list[str]) -> list[Finding]:
    """``password=…``, ``"api_key": "…"``, ``--password=…``, ``my password is …``, ``密码是…``,
    ``wachtwoord: …``, ``npm token 1b2c…``, ``the signing key is 9f86…``."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: spans would shift
        lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    out: list[Finding] = []
    seen: set[int] = set()
    for stem in stems:
        words_ = ((stem, True),) if stem in _IDENTIFIER_STEMS else ()
        for word, identifier in (*words_, *((p, False) for p in _STEMS[stem])):
            at = lowered.find(word)
            while at >= 0:
                end = at + len(word)
                name_end = end
                weak = False  # a name that holds a credential only when its value is token-shaped
                if identifier:
                    start = at
                    while start > 0 and at - start < 64 and text[start - 1] in _IDENT_CHARS:
                        start -= 1
                    right = _IDENT_RIGHT.match(text, end)
                    name_end = right.end() if right else end
                    # camelCase (``dbPassword``, ``encryptionKey``) is read as snake_case.
                    name = _CAMEL.sub("_", text[start:name_end].lstrip("-."))
                    ok = CREDENTIAL_NAME.match(name) is not None
                    if not ok and _WEAK_NAME.match(name) and "_" in name.replace("-", "_").replace(".", "_"):
                        ok = weak = _NOT_CREDENTIAL.search(name) is None
                else:
                    ok = True
                if ok and name_end not in seen:
                    seen.add(name_end)
                    found = _value_after(text, name_end, foreign=word in _FOREIGN, weak=weak)
                    if found is not None:
                        out.append(Finding("credential", *found, "own.assignment"))
                at = lowered.find(word, end)
    return out


def _value_after(text: str, name_end: int, *, foreign: bool, weak: bool) -> tuple[int, int] | None:
    """The span of the credential value that follows a credential word ending at ``name_end``."""
    m = (_TAIL_FOREIGN if foreign else _TAIL).match(text, name_end)
    if m is not None:
        g = 2 if m.group(2) is not None else 3
        value = m.group(g)
        if g == 3:
            value = _trimmed(value, assigned="=" in text[name_end:m.start(g)])
        if _credential_value(value, quoted=g == 2) and (not weak or _token_shaped(value)):
            return m.start(g), m.start(g) + len(value)
    loose = _LOOSE.match(text, name_end)
    if loose is None:
        return None
    value = loose.group(1).rstrip(".")
    # A random-looking one is the entropy rule's (``high_entropy``): this rule adds the shapes
    # that rule leaves alone, UUIDs and hex.
    if _token_shaped(value) and not looks_random(value):
        return loose.start(1), loose.start(1) + len(value)
    return None


def _trimmed(value: str, *, assigned: bool) -> str:
    """An unquoted value without what ends the sentence around it: a trailing period, comma or
    colon in prose (an ``=`` assignment keeps them; ``!`` and ``?`` are kept always: a password
    often ends in one, and masking one more character leaks nothing), a closing parenthesis
    that opens nowhere in the value, and the words of a language without spaces after an
    ASCII value (``パスワードはSakura2024!です``)."""
    if value[0].isascii() and not value.isascii():
        value = value[:next(i for i, c in enumerate(value) if not c.isascii())]
    while value.endswith(")") and value.count(")") > value.count("("):
        value = value[:-1]
    return value if assigned else value.rstrip(".,:")


def _token_shaped(value: str) -> bool:
    """Whether a value has the shape of a token, not of a word, a number or a version: a UUID,
    16 or more hex characters with letters and digits, or a random-looking run."""
    if len(value) < 16 or _UUIDISH.match(value):
        return len(value) >= 16
    if value.isdigit() or value.isalpha() or _VERSION.match(value) or _looks_like_identifier(value):
        return False
    if _HEX.match(value):
        return any(c.isdigit() for c in value) and not value.isdigit()
    digits = sum(c.isdigit() for c in value)
    return digits >= 2 and (looks_random(value) or entropy(value) >= 3.5) and not _words_only(value)


def _words_only(value: str) -> bool:
    """``user_settings_2024_v2``: words of letters joined by separators, a few digits."""
    parts = [p for p in re.split(r"[_.-]", value) if p]
    return len(parts) >= 2 and all(p.isalpha() or p.isdigit() or len(p) <= 3 for p in parts)


def _generic(text: str, joined: _Joined, cleared: list[tuple[int, int]]) -> Iterator[Finding]:
    """The high-entropy rule, on the pieces of the long runs; never on what is known not to
    be a secret (``_NOT_SECRET``) or was decoded and found clean (``cleared``)."""
    spared: list[tuple[int, int]] | None = None  # found when first needed: most text has no candidate
    for m in _PIECE.finditer(joined.text):
        piece = m.group()
        if looks_random(piece.lstrip("/")):
            start, end = joined.to_text(*m.span())
            if spared is None:
                spared = [m.span() for m in _NOT_SECRET.finditer(text)] if _NOT_SECRET_HINT.search(text) else []
                spared += cleared
            if not any(a <= start and end <= b for a, b in spared):
                yield Finding("high_entropy", start, end, "own.entropy")


def _inside_hex(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is a piece of a longer hex run (a digest, upper-cased or not):
    some plugin patterns have no token boundaries and match inside one."""
    if not _HEX.match(text[start:end]):
        return False
    return (start > 0 and text[start - 1] in _HEX_CHARS) or (end < len(text) and text[end] in _HEX_CHARS)


def _stripped(m: re.Match[str], g: int) -> tuple[int, int]:
    """The span of group ``g`` without the delimiters some plugin patterns include."""
    start, end = m.span(g)
    value = m.group(g)
    lead = len(value) - len(value.lstrip(" \t\r\n=:\"'"))
    trail = len(value) - len(value.rstrip(" \t\r\n\"'"))
    return start + lead, end - trail


def _credential_value(value: str, *, quoted: bool) -> bool:
    """Whether what follows a credential keyword is a value (not a word, number or reference)."""
    if len(value) < 4 or _PLACEHOLDER.match(value) or value.isdigit() or (not quoted and _CALL.match(value)):
        return False
    if quoted:
        return " " not in value.strip() or (len(value) >= 12 and not value.replace(" ", "").isalpha())
    # Unquoted prose: "the token is expired", "password: required" are words, not values.
    if value.isalpha() and (value.islower() or value.istitle() or value.isupper()):
        return False
    return not _looks_like_identifier(value)


def _looks_like_identifier(value: str) -> bool:
    """A dotted name, a path or a file name: what follows ``token:`` in code-ish prose."""
    if "/" in value and not any(c.isdigit() for c in value):
        return True
    return bool(re.fullmatch(r"[a-z_]+(?:\.[a-z_]+)+(?:\(\))?", value))


def looks_random(token: str) -> bool:
    """The generic rule: mixed classes, frequent class changes, high entropy; never hex or UUIDs."""
    if _HEX.match(token) or _UUIDISH.match(token):
        return False
    core = token.rstrip("=")
    if not (any(c.isupper() for c in core) and any(c.islower() for c in core)
            and any(c.isdigit() for c in core)):
        return False
    digits = sum(c.isdigit() for c in core)
    if digits < 2:
        return False
    changes = sum(_cls(a) != _cls(b) for a, b in itertools.pairwise(core))
    if changes / (len(core) - 1) < 0.35:
        return False
    return entropy(core) >= min(4.0, 0.85 * math.log2(len(core)))


def _cls(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def entropy(s: str) -> float:
    """Shannon entropy of ``s`` in bits per character."""
    n = len(s)
    return -sum(k / n * math.log2(k / n) for k in Counter(s).values())
