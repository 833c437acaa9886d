"""A seeded corpus for the detectors: fake credentials in every common syntax, look-alikes
that are not secrets, personal data of a dozen countries, and benign chat.

Why generated: a fixed list of samples gets tuned on until it passes; a generator with a
seed gives fresh bodies (and, with a second seed and the syntaxes and kinds held out of
tuning, figures on text the rules were not written against). Every secret is random with
the shape of its kind; none is real. ``Sample.secret`` is the part that must be masked.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

_UP = string.ascii_uppercase
_LO = string.ascii_lowercase
_DIG = string.digits
_ALNUM = _UP + _LO + _DIG
_HEXL = "0123456789abcdef"
_B64 = _ALNUM + "+/"
_URLSAFE = _ALNUM + "-_"
# Punctuation people put in passwords; the URL-safe subset goes in URLs and DSNs unescaped.
_PUNCT = "!#$%&*+-.=?@^_~"
_URL_PUNCT = "!*-._~"


@dataclass(frozen=True)
class Sample:
    """One text and the substring of it that a detector must cover (empty: must find nothing)."""

    group: str      # "secret", "lookalike", "personal", "benign"
    kind: str
    syntax: str
    text: str
    secret: str


Gen = Callable[[random.Random], str]


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, alphabet: str, n: int) -> str:
    """A random run that has upper case, lower case and digits (as real token bodies do)."""
    s = list(_r(rng, alphabet, n))
    for i, pool in zip(rng.sample(range(n), min(n, 4)), (_UP, _LO, _DIG, _DIG), strict=False):
        s[i] = rng.choice(pool)
    return "".join(s)


def _password(rng: random.Random, punct: str = _PUNCT) -> str:
    """A human password: letters, digits and punctuation, 10-20 characters."""
    n = rng.randint(10, 20)
    body = [rng.choice(_LO) for _ in range(n)]
    for i in rng.sample(range(n), 3):
        body[i] = rng.choice(_UP)
    for i in rng.sample(range(n), 2):
        body[i] = rng.choice(_DIG)
    for i in rng.sample(range(1, n - 1), 2):
        body[i] = rng.choice(punct)
    return "".join(body)


def _words_password(rng: random.Random) -> str:
    words = ["orbit", "maple", "cactus", "violet", "tundra", "pepper", "anchor", "nimbus", "quartz", "falcon"]
    return "-".join(rng.sample(words, 3)) + str(rng.randint(10, 99)) + rng.choice("!?#")


def _pem(rng: random.Random, label: str, lines: int = 12) -> str:
    body = "\n".join(_r(rng, _B64, 64) for _ in range(lines))
    return f"-----BEGIN {label}-----\n{body}\n{_r(rng, _B64, 20)}==\n-----END {label}-----"


def _jwt(rng: random.Random) -> str:
    def seg(obj: str) -> str:
        return base64.urlsafe_b64encode(obj.encode()).decode().rstrip("=")
    head = seg('{"alg":"HS256","typ":"JWT"}')
    claims = seg(f'{{"sub":"{rng.randint(1, 10**6)}","name":"{_r(rng, _LO, 6)}",'
                 f'"iat":{rng.randint(1_600_000_000, 1_800_000_000)}}}')
    return f"{head}.{claims}.{_r(rng, _URLSAFE, 43)}"


def _bech32(rng: random.Random, n: int) -> str:
    return _r(rng, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", n)


# kind: (shape, variable name, prose label index, generator). Shapes: "token" (a value that
# stands alone), "password" (needs its keyword: any string can be a password), "block" (a PEM
# block), "hexkey" (hex behind a keyword), "url" (the secret inside a URL or DSN).
_KINDS: dict[str, tuple[str, str, int, Gen]] = {
    "aws_access_key_id": ("token", "AWS_ACCESS_KEY_ID", 1, lambda r: "AKIA" + _r(r, _UP + _DIG, 16)),
    "aws_sts_key_id": ("token", "AWS_ACCESS_KEY_ID", 1, lambda r: "ASIA" + _r(r, _UP + _DIG, 16)),
    "aws_secret_access_key": ("token", "AWS_SECRET_ACCESS_KEY", 1, lambda r: _mixed(r, _B64, 40)),
    "aws_session_token": ("token", "AWS_SESSION_TOKEN", 2, lambda r: "IQoJb3JpZ2lu" + _mixed(r, _B64, 180)),
    "github_pat_classic": ("token", "GITHUB_TOKEN", 2, lambda r: "ghp_" + _mixed(r, _ALNUM, 36)),
    "github_oauth": ("token", "GH_OAUTH_TOKEN", 2, lambda r: "gho_" + _mixed(r, _ALNUM, 36)),
    "github_user_to_server": ("token", "GH_TOKEN", 2, lambda r: "ghu_" + _mixed(r, _ALNUM, 36)),
    "github_server_to_server": ("token", "GH_APP_TOKEN", 2, lambda r: "ghs_" + _mixed(r, _ALNUM, 36)),
    "github_refresh": ("token", "GH_REFRESH_TOKEN", 2, lambda r: "ghr_" + _mixed(r, _ALNUM, 36)),
    "github_fine_grained": ("token", "GITHUB_PAT", 2,
                            lambda r: "github_pat_" + _mixed(r, _ALNUM, 22) + "_" + _mixed(r, _ALNUM, 59)),
    "gitlab_pat": ("token", "GITLAB_TOKEN", 2, lambda r: "glpat-" + _mixed(r, _URLSAFE, 20)),
    "gitlab_deploy": ("token", "GITLAB_DEPLOY_TOKEN", 2, lambda r: "gldt-" + _mixed(r, _URLSAFE, 20)),
    "gitlab_runner": ("token", "RUNNER_TOKEN", 2, lambda r: "glrt-" + _mixed(r, _URLSAFE, 20)),
    "bitbucket_app_password": ("token", "BITBUCKET_APP_PASSWORD", 0, lambda r: "ATBB" + _mixed(r, _ALNUM, 32)),
    "slack_bot": ("token", "SLACK_BOT_TOKEN", 2,
                  lambda r: f"xoxb-{_r(r, _DIG, 12)}-{_r(r, _DIG, 13)}-{_mixed(r, _ALNUM, 24)}"),
    "slack_user": ("token", "SLACK_USER_TOKEN", 2,
                   lambda r: f"xoxp-{_r(r, _DIG, 12)}-{_r(r, _DIG, 12)}-{_r(r, _DIG, 13)}-{_r(r, _HEXL, 32)}"),
    "slack_app": ("token", "SLACK_APP_TOKEN", 2,
                  lambda r: f"xapp-1-A{_r(r, _UP + _DIG, 10)}-{_r(r, _DIG, 13)}-{_r(r, _HEXL, 64)}"),
    "slack_webhook": ("token", "SLACK_WEBHOOK_URL", 3, lambda r: "https://hooks.slack.com/services/T"
                      + _r(r, _UP + _DIG, 8) + "/B" + _r(r, _UP + _DIG, 8) + "/" + _mixed(r, _ALNUM, 24)),
    "discord_bot": ("token", "DISCORD_TOKEN", 2, lambda r: r.choice("MN") + _mixed(r, _ALNUM, 23) + "."
                    + _mixed(r, _URLSAFE, 6) + "." + _mixed(r, _URLSAFE, 27)),
    "telegram_bot": ("token", "TELEGRAM_BOT_TOKEN", 2,
                     lambda r: f"{r.randint(10**8, 10**10)}:AA{_mixed(r, _URLSAFE, 33)}"),
    "stripe_secret_live": ("token", "STRIPE_SECRET_KEY", 1, lambda r: "sk_live_" + _mixed(r, _ALNUM, 24)),
    "stripe_secret_test": ("token", "STRIPE_SECRET_KEY", 1, lambda r: "sk_test_" + _mixed(r, _ALNUM, 24)),
    "stripe_restricted": ("token", "STRIPE_RESTRICTED_KEY", 1, lambda r: "rk_live_" + _mixed(r, _ALNUM, 24)),
    "stripe_webhook_secret": ("token", "STRIPE_WEBHOOK_SECRET", 1, lambda r: "whsec_" + _mixed(r, _ALNUM, 32)),
    "square_access": ("token", "SQUARE_ACCESS_TOKEN", 2, lambda r: "EAAA" + _mixed(r, _URLSAFE, 60)),
    "square_oauth_secret": ("token", "SQUARE_OAUTH_SECRET", 1, lambda r: "sq0csp-" + _mixed(r, _URLSAFE, 43)),
    "braintree_access": ("token", "BRAINTREE_ACCESS_TOKEN", 2, lambda r: "access_token$production$"
                         + _r(r, _LO + _DIG, 16) + "$" + _r(r, _HEXL, 32)),
    "shopify_admin": ("token", "SHOPIFY_ACCESS_TOKEN", 2, lambda r: "shpat_" + _r(r, _HEXL, 32)),
    "shopify_shared_secret": ("token", "SHOPIFY_API_SECRET", 1, lambda r: "shpss_" + _r(r, _HEXL, 32)),
    "twilio_api_key": ("token", "TWILIO_API_KEY", 1, lambda r: "SK" + _r(r, _HEXL, 32)),
    "twilio_auth_token": ("hexkey", "TWILIO_AUTH_TOKEN", 2, lambda r: _r(r, _HEXL, 32)),
    "sendgrid": ("token", "SENDGRID_API_KEY", 1,
                 lambda r: "SG." + _mixed(r, _URLSAFE, 22) + "." + _mixed(r, _URLSAFE, 43)),
    "mailgun": ("token", "MAILGUN_API_KEY", 1, lambda r: "key-" + _r(r, _HEXL, 32)),
    "mailchimp": ("token", "MAILCHIMP_API_KEY", 1, lambda r: _r(r, _HEXL, 32) + "-us" + str(r.randint(1, 20))),
    "openai_project": ("token", "OPENAI_API_KEY", 1, lambda r: "sk-proj-" + _mixed(r, _URLSAFE, 120)),
    "openai_legacy": ("token", "OPENAI_API_KEY", 1, lambda r: "sk-" + _mixed(r, _ALNUM, 48)),
    "anthropic": ("token", "ANTHROPIC_API_KEY", 1, lambda r: "sk-ant-api03-" + _mixed(r, _URLSAFE, 93) + "AA"),
    "huggingface": ("token", "HF_TOKEN", 2, lambda r: "hf_" + _mixed(r, _ALNUM, 34)),
    "google_api_key": ("token", "GOOGLE_API_KEY", 1, lambda r: "AIza" + _mixed(r, _URLSAFE, 35)),
    "google_oauth_secret": ("token", "GOOGLE_CLIENT_SECRET", 1, lambda r: "GOCSPX-" + _mixed(r, _URLSAFE, 28)),
    "azure_storage": ("token", "AZURE_STORAGE_KEY", 1, lambda r: _mixed(r, _B64, 86) + "=="),
    "azure_client_secret": ("password", "AZURE_CLIENT_SECRET", 1,
                            lambda r: _mixed(r, _ALNUM, 3) + "8Q~" + _mixed(r, _ALNUM + "~._-", 31)),
    "npm": ("token", "NPM_TOKEN", 2, lambda r: "npm_" + _mixed(r, _ALNUM, 36)),
    "pypi": ("token", "PYPI_TOKEN", 2, lambda r: "pypi-AgEIcHlwaS5vcmc" + _mixed(r, _URLSAFE, 70)),
    "dockerhub": ("token", "DOCKERHUB_TOKEN", 2, lambda r: "dckr_pat_" + _mixed(r, _URLSAFE, 27)),
    "digitalocean": ("token", "DIGITALOCEAN_TOKEN", 2, lambda r: "dop_v1_" + _r(r, _HEXL, 64)),
    "heroku": ("hexkey", "HEROKU_API_KEY", 1, lambda r: "-".join(_r(r, _HEXL, n) for n in (8, 4, 4, 4, 12))),
    "datadog": ("hexkey", "DD_API_KEY", 1, lambda r: _r(r, _HEXL, 32)),
    "newrelic": ("token", "NEW_RELIC_API_KEY", 1, lambda r: "NRAK-" + _r(r, _UP + _DIG, 27)),
    "sentry_auth": ("token", "SENTRY_AUTH_TOKEN", 2, lambda r: "sntrys_" + _mixed(r, _ALNUM, 60)),
    "postman": ("token", "POSTMAN_API_KEY", 1, lambda r: "PMAK-" + _r(r, _HEXL, 24) + "-" + _r(r, _HEXL, 34)),
    "linear": ("token", "LINEAR_API_KEY", 1, lambda r: "lin_api_" + _mixed(r, _ALNUM, 40)),
    "notion": ("token", "NOTION_TOKEN", 2, lambda r: "ntn_" + _mixed(r, _ALNUM, 46)),
    "airtable": ("token", "AIRTABLE_TOKEN", 2, lambda r: "pat" + _mixed(r, _ALNUM, 14) + "." + _r(r, _HEXL, 64)),
    "atlassian": ("token", "JIRA_API_TOKEN", 2, lambda r: "ATATT3xFfGF0" + _mixed(r, _URLSAFE, 180)),
    "okta": ("token", "OKTA_API_TOKEN", 2, lambda r: "00" + _mixed(r, _URLSAFE, 40)),
    "vault": ("token", "VAULT_TOKEN", 2, lambda r: "hvs." + _mixed(r, _URLSAFE, 90)),
    "terraform_cloud": ("token", "TFE_TOKEN", 2,
                        lambda r: _mixed(r, _ALNUM, 14) + ".atlasv1." + _mixed(r, _ALNUM, 67)),
    "doppler": ("token", "DOPPLER_TOKEN", 2, lambda r: "dp.st." + _mixed(r, _ALNUM, 43)),
    "pulumi": ("token", "PULUMI_ACCESS_TOKEN", 2, lambda r: "pul-" + _r(r, _HEXL, 40)),
    "grafana_sa": ("token", "GRAFANA_TOKEN", 2, lambda r: "glsa_" + _mixed(r, _ALNUM, 32) + "_" + _r(r, _HEXL, 8)),
    "databricks": ("token", "DATABRICKS_TOKEN", 2, lambda r: "dapi" + _r(r, _HEXL, 32)),
    "cloudflare": ("token", "CLOUDFLARE_API_TOKEN", 2, lambda r: _mixed(r, _URLSAFE, 40)),
    "alibaba": ("token", "ALIBABA_ACCESS_KEY_ID", 1, lambda r: "LTAI" + _mixed(r, _ALNUM, 20)),
    "age_secret": ("token", "AGE_SECRET_KEY", 1, lambda r: "AGE-SECRET-KEY-1" + _bech32(r, 58)),
    "jwt": ("token", "ACCESS_TOKEN", 2, _jwt),
    "generic_api_key": ("token", "API_KEY", 1, lambda r: _mixed(r, _ALNUM, 32)),
    "generic_secret_b64": ("token", "CLIENT_SECRET", 1, lambda r: _mixed(r, _B64, 43) + "="),
    "bearer_opaque": ("token", "AUTH_TOKEN", 2, lambda r: _mixed(r, _URLSAFE + ".~", 40)),
    "flask_secret_hex": ("hexkey", "SECRET_KEY", 1, lambda r: _r(r, _HEXL, 32)),
    "encryption_key_hex": ("hexkey", "ENCRYPTION_KEY", 1, lambda r: _r(r, _HEXL, 64)),
    "webhook_secret_hex": ("hexkey", "WEBHOOK_SECRET", 1, lambda r: _r(r, _HEXL, 40)),
    "django_secret": ("password", "DJANGO_SECRET_KEY", 1,
                      lambda r: _mixed(r, _ALNUM + "!@#%^&*-_=+", 50)),
    "db_password": ("password", "DB_PASSWORD", 0, _password),
    "postgres_password": ("password", "POSTGRES_PASSWORD", 0, _password),
    "mysql_root_password": ("password", "MYSQL_ROOT_PASSWORD", 0, _password),
    "redis_password": ("password", "REDIS_PASSWORD", 0, _password),
    "smtp_password": ("password", "SMTP_PASSWORD", 0, _password),
    "ldap_bind_password": ("password", "LDAP_BIND_PASSWORD", 0, _password),
    "admin_password": ("password", "ADMIN_PASSWORD", 0, _password),
    "wifi_passphrase": ("password", "WIFI_PASSPHRASE", 0, _words_password),
    "keystore_password": ("password", "KEYSTORE_PASS", 0, _password),
    "ssh_password": ("password", "SSH_PASSWORD", 0, _password),
    "rsa_private_key": ("block", "PRIVATE_KEY", 1, lambda r: _pem(r, "RSA PRIVATE KEY")),
    "ec_private_key": ("block", "EC_PRIVATE_KEY", 1, lambda r: _pem(r, "EC PRIVATE KEY", 3)),
    "pkcs8_private_key": ("block", "PRIVATE_KEY", 1, lambda r: _pem(r, "PRIVATE KEY")),
    "encrypted_private_key": ("block", "PRIVATE_KEY", 1, lambda r: _pem(r, "ENCRYPTED PRIVATE KEY")),
    "openssh_private_key": ("block", "SSH_PRIVATE_KEY", 1, lambda r: _pem(r, "OPENSSH PRIVATE KEY", 6)),
    "pgp_private_key": ("block", "GPG_PRIVATE_KEY", 1, lambda r: _pem(r, "PGP PRIVATE KEY BLOCK", 10)),
    "postgres_dsn": ("url", "DATABASE_URL", 3, lambda r: "postgresql://app:{p}@db.internal:5432/orders"),
    "mysql_dsn": ("url", "MYSQL_URL", 3, lambda r: "mysql://root:{p}@10.0.3.7:3306/shop"),
    "mongodb_srv": ("url", "MONGO_URI", 3, lambda r: "mongodb+srv://svc:{p}@cluster0.internal/app?retryWrites=true"),
    "redis_url": ("url", "REDIS_URL", 3, lambda r: "redis://:{p}@cache.internal:6379/0"),
    "amqp_url": ("url", "BROKER_URL", 3, lambda r: "amqps://worker:{p}@mq.internal:5671/vhost"),
    "https_basic_auth": ("url", "REGISTRY_URL", 3, lambda r: "https://deploy:{p}@registry.internal/v2/"),
    "ftp_url": ("url", "BACKUP_URL", 3, lambda r: "ftp://backup:{p}@files.internal/nightly"),
}

# Prose labels by language: (password, key, token, URL) in each.
_LABELS = {
    "en": ("the password is", "the API key is", "the token is", "the connection URL is"),
    "de": ("das Passwort ist", "der API-Schlüssel ist", "der Token ist", "die Verbindungs-URL ist"),
    "fr": ("le mot de passe est", "la clé API est", "le token est", "l'URL de connexion est"),
    "es": ("la contraseña es", "la clave de API es", "el token es", "la URL de conexión es"),
    "pt": ("a senha é", "a chave de API é", "o token é", "a URL de conexão é"),
}


def _snake(name: str) -> str:
    return name.lower()


def _camel(name: str) -> str:
    head, *rest = name.lower().split("_")
    return head + "".join(w.title() for w in rest)


def _dash(name: str) -> str:
    return name.lower().replace("_", "-")


# Syntax: how a value named ``n`` is written. The value ``v`` is placed verbatim.
_SYNTAX: dict[str, Callable[[str, str, int], str]] = {
    "env": lambda n, v, i: f"{n}={v}",
    "env_export": lambda n, v, i: f'export {n}="{v}"',
    "dotenv_comment": lambda n, v, i: f"# production\n{n}='{v}'\nDEBUG=false",
    "yaml": lambda n, v, i: f"services:\n  api:\n    environment:\n      {_snake(n)}: {v}\n",
    "yaml_quoted": lambda n, v, i: f'{_snake(n)}: "{v}"',
    "json": lambda n, v, i: f'{{"name": "api", "{_camel(n)}": "{v}", "port": 8080}}',
    "toml": lambda n, v, i: f'[service]\n{_snake(n)} = "{v}"\nretries = 3',
    "ini": lambda n, v, i: f"[default]\nregion = eu-west-1\n{_snake(n)} = {v}\n",
    "cli_eq": lambda n, v, i: f"deployctl login --{_dash(n)}={v} --verbose",
    "cli_space": lambda n, v, i: f"deployctl login --{_dash(n)} '{v}' --verbose",
    "python": lambda n, v, i: f'client = Client(region="eu")\n{_snake(n)} = "{v}"',
    "js": lambda n, v, i: f"const {_camel(n)} = '{v}';",
    "go": lambda n, v, i: f'\t{_camel(n)} := "{v}"',
    "docker_env": lambda n, v, i: f"docker run -e {n}={v} -p 8080:8080 api:1.4",
    "k8s_secret": lambda n, v, i: f"kubectl create secret generic api --from-literal={_snake(n)}={v}",
    "prose_en": lambda n, v, i: f"Sure, {_LABELS['en'][i]} {v} so you can log in.",
    "prose_de": lambda n, v, i: f"Hier: {_LABELS['de'][i]} {v}",
    "prose_fr": lambda n, v, i: f"Pour info, {_LABELS['fr'][i]} {v}",
    "prose_es": lambda n, v, i: f"Ojo, {_LABELS['es'][i]} {v}",
    "prose_pt": lambda n, v, i: f"Anota aí: {_LABELS['pt'][i]} {v}",
}
_TOKEN_ONLY: dict[str, Callable[[str, str, int], str]] = {
    "header_bearer": lambda n, v, i: f"curl -H 'Authorization: Bearer {v}' https://api.internal/v1/me",
    "header_token": lambda n, v, i: f"Authorization: token {v}",
    "bare_prose": lambda n, v, i: f"I pasted {v} into the CI settings, can you check it works?",
}
_PASSWORD_ONLY: dict[str, Callable[[str, str, int], str]] = {
    "mysql_p": lambda n, v, i: f"mysql -h db.internal -u root -p'{v}' shop",
    "sshpass": lambda n, v, i: f"sshpass -p '{v}' ssh deploy@10.0.0.12",
    "conn_string": lambda n, v, i: f"Server=db.internal;Database=shop;User Id=app;Password={v};",
    "url_in_dsn": lambda n, v, i: f"postgres://app:{v}@db.internal:5432/shop",
}
_URL_SYNTAX = ("env", "yaml", "json", "toml", "python", "cli_eq", "docker_env", "prose_en", "prose_de", "go")
_BLOCK_SYNTAX = ("raw", "yaml_block", "json_escaped", "prose_en", "env_quoted")

# Held out of tuning: these syntaxes and kinds were not looked at while the rules were written.
HELD_OUT_SYNTAX = frozenset({"go", "prose_pt", "k8s_secret", "sshpass", "header_token", "json_escaped"})
HELD_OUT_KINDS = frozenset({"doppler", "pulumi", "ldap_bind_password", "ftp_url", "ec_private_key",
                            "webhook_secret_hex", "linear", "keystore_password"})


def _url_password(rng: random.Random) -> str:
    return _password(rng, _URL_PUNCT)


def _block(syntax: str, n: str, v: str) -> str:
    if syntax == "raw":
        return f"Here is the key:\n{v}\n"
    if syntax == "yaml_block":
        return f"{_snake(n)}: |\n" + "\n".join("  " + line for line in v.splitlines())
    if syntax == "json_escaped":
        return '{"type": "service_account", "' + _snake(n) + '": "' + v.replace("\n", "\\n") + '"}'
    if syntax == "prose_en":
        return f"I generated a new key for the deploy user, {v} — keep it safe."
    return f'{n}="{v}"'


def secrets(seed: int) -> list[Sample]:
    """Every kind in every syntax it is written in, with bodies drawn from ``seed``."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not keys
    out: list[Sample] = []
    for kind, (shape, name, label, gen) in _KINDS.items():
        if shape == "block":
            for syntax in _BLOCK_SYNTAX:
                v = gen(rng)
                secret = v.replace("\n", "\\n") if syntax == "json_escaped" else v
                if syntax == "yaml_block":
                    secret = v.splitlines()[1]  # every line is masked: the first body line stands for them
                out.append(Sample("secret", kind, syntax, _block(syntax, name, v), secret))
            continue
        if shape == "url":
            for syntax in _URL_SYNTAX:
                p = _url_password(rng)
                url = gen(rng).format(p=p)
                out.append(Sample("secret", kind, syntax, _SYNTAX[syntax](name, url, 3), p))
            continue
        syntaxes = dict(_SYNTAX)
        if shape == "token":
            syntaxes |= _TOKEN_ONLY
        if shape == "password":
            syntaxes |= _PASSWORD_ONLY
        for syntax, fmt in syntaxes.items():
            v = _url_password(rng) if syntax == "url_in_dsn" else gen(rng)
            out.append(Sample("secret", kind, syntax, fmt(name, v, label), v))
    return out


def _b64(rng: random.Random, n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


def lookalikes(seed: int) -> list[Sample]:
    """Random-looking strings that are not secrets, in the contexts where they appear."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not keys
    out: list[Sample] = []

    def add(kind: str, text: str) -> None:
        out.append(Sample("lookalike", kind, "", text, ""))

    for _ in range(6):
        h64, h40, h32 = _r(rng, _HEXL, 64), _r(rng, _HEXL, 40), _r(rng, _HEXL, 32)
        add("ssh_rsa_pub", f"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{_b64(rng, 200)} deploy@ci")
        add("ssh_ed25519_pub", f"authorized_keys: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{_r(rng, _B64, 43)} me@laptop")
        add("pem_public_key", _pem(rng, "PUBLIC KEY", 6))
        add("pem_rsa_public_key", "public_key = '''" + _pem(rng, "RSA PUBLIC KEY", 4) + "'''")
        add("certificate", _pem(rng, "CERTIFICATE", 14))
        add("csr", _pem(rng, "CERTIFICATE REQUEST", 8))
        add("sha256_checksum", f"{h64}  agentledger-0.4.1.tar.gz")
        add("sha256_prose", f"The sha256 of the wheel is {h64}, matching the release page.")
        add("sha256_prefixed", f"image digest sha256:{h64}")
        add("sha1_checksum", f"sha1sum: {h40}  backup.tar")
        add("md5_checksum", f"MD5 ({_r(rng, _LO, 6)}.iso) = {h32}")
        add("git_commit", f"fixed in commit {h40} (merged by the bot)")
        add("git_short", f"git cherry-pick {h40[:12]} && git push")
        add("git_log", f"commit {h40}\nAuthor: Dev <dev@corp.internal>\n\n    fix retry")
        add("npm_integrity", f'"integrity": "sha512-{_b64(rng, 64)}"')
        add("yarn_lock", f'  resolved "https://registry.internal/x/-/x-1.2.{rng.randint(0, 9)}.tgz#{h40}"\n'
                         f"  integrity sha512-{_b64(rng, 64)}")
        add("poetry_lock", f'{{file = "pkg-1.0.tar.gz", hash = "sha256:{h64}"}}')
        add("pip_hash", f"requests==2.31.0 --hash=sha256:{h64}")
        add("go_sum", f"golang.internal/x/text v0.14.0 h1:{_b64(rng, 32)}")
        add("sri", f'<script src="app.js" integrity="sha384-{_b64(rng, 48)}"></script>')
        add("stripe_publishable_live", f"STRIPE_PUBLISHABLE_KEY=pk_live_{_mixed(rng, _ALNUM, 24)}")
        add("stripe_publishable_test", f"const stripe = Stripe('pk_test_{_mixed(rng, _ALNUM, 24)}');")
        add("uuid", f"request id {'-'.join(_r(rng, _HEXL, n) for n in (8, 4, 4, 4, 12))} failed with 502")
        add("uuid_json", '{"trace_id": "' + "-".join(_r(rng, _HEXL, n) for n in (8, 4, 4, 4, 12)) + '"}')
        add("docker_digest", f"FROM python:3.12-slim@sha256:{h64}")
        add("data_url_png", f'<img src="data:image/png;base64,{_b64(rng, 120)}">')
        add("data_url_css", f"background: url(data:image/svg+xml;base64,{_b64(rng, 90)});")
        add("version", f"upgraded from v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}-rc.1+build."
                       f"{rng.randint(100, 999)} to 2.0.0")
        add("blake3", f"blake3: {h64}")
        add("ipfs_cid", f"pinned as bafybei{_r(rng, 'abcdefghijklmnopqrstuvwxyz234567', 52)}")
        add("tool_call_id", f"tool_call id call_{_mixed(rng, _ALNUM, 24)} returned")
        add("password_talk", "Your password must be at least 12 characters and include a symbol.")
        add("token_count", f"That reply used {rng.randint(100, 9000)} tokens out of a 200000 token budget.")
        add("key_talk", "Rotate the API key from the dashboard, then restart the worker.")
        add("placeholder", "API_KEY=your-api-key-here\nDB_PASSWORD=changeme")
        add("env_reference", 'password = os.environ["DB_PASSWORD"]')
    return out


def _phones(rng: random.Random) -> list[tuple[str, str]]:
    import phonenumbers  # noqa: PLC0415 - only the corpus needs it

    out = []
    for region in ("US", "GB", "DE", "FR", "ES", "IT", "NL", "JP", "BR", "IN", "AU", "MX", "PL", "SE"):
        base = phonenumbers.example_number_for_type(region, phonenumbers.PhoneNumberType.MOBILE)
        for _ in range(40):
            n = phonenumbers.PhoneNumber(country_code=base.country_code,
                                         national_number=int(str(base.national_number)[:-4]
                                                             + _r(rng, _DIG, 4)))
            if phonenumbers.is_valid_number(n):
                fmt = rng.choice((phonenumbers.PhoneNumberFormat.INTERNATIONAL, phonenumbers.PhoneNumberFormat.E164))
                out.append((region, phonenumbers.format_number(n, fmt)))
                break
    return out


def _ibans(rng: random.Random) -> list[tuple[str, str]]:
    from stdnum import iban  # noqa: PLC0415

    shapes = {"DE": "18n", "FR": "10n11c2n", "ES": "20n", "IT": "1a10n12c", "NL": "4a10n", "GB": "4a14n",
              "BE": "12n", "AT": "16n", "CH": "17n", "PL": "24n", "PT": "21n", "SE": "20n"}
    out = []
    for country, shape in shapes.items():
        for _ in range(200):
            bban = ""
            i = 0
            while i < len(shape):
                j = i
                while shape[j].isdigit():
                    j += 1
                count, t = int(shape[i:j]), shape[j]
                bban += _r(rng, _DIG if t == "n" else _UP if t == "a" else _UP + _DIG, count)
                i = j + 1
            value = country + iban.calc_check_digits(country + "00" + bban) + bban
            if iban.is_valid(value):
                out.append((country, " ".join(value[k:k + 4] for k in range(0, len(value), 4))
                            if rng.random() < 0.5 else value))
                break
    return out


def _ids(rng: random.Random) -> list[tuple[str, str, str]]:
    from stdnum.br import cpf  # noqa: PLC0415
    from stdnum.es import dni  # noqa: PLC0415
    from stdnum.in_ import aadhaar  # noqa: PLC0415
    from stdnum.us import ssn  # noqa: PLC0415

    out = []
    for _ in range(3):
        while not ssn.is_valid(v := f"{rng.randint(1, 665):03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"):
            pass
        out.append(("US", "ssn", v))
        d = f"{rng.randint(10**7, 10**8 - 1)}"
        out.append(("ES", "dni", d + dni.calc_check_digit(d)))
        c = _r(rng, _DIG, 9)
        while not cpf.is_valid(c + (k := _r(rng, _DIG, 2))):
            pass
        c += k
        out.append(("BR", "cpf", f"{c[:3]}.{c[3:6]}.{c[6:9]}-{c[9:]}"))
        while not aadhaar.is_valid(a := str(rng.randint(2, 9)) + _r(rng, _DIG, 11)):
            pass
        out.append(("IN", "aadhaar", f"{a[:4]} {a[4:8]} {a[8:]}"))
    return out


def personal(seed: int) -> list[Sample]:
    """Phone numbers, IBANs, national ids and e-mail addresses in sentences."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not keys
    out: list[Sample] = []
    for region, p in _phones(rng):
        text = rng.choice(("You can reach me on {v} after six.", "Kontakt: {v}", "Mi número es {v}.",
                           "call {v} if the build breaks"))
        out.append(Sample("personal", "phone", region, text.format(v=p), p))
    for country, v in _ibans(rng):
        text = rng.choice(("Please wire it to {v}.", "IBAN: {v}", "Überweisung an {v} bitte", "mon IBAN est {v}"))
        out.append(Sample("personal", "iban", country, text.format(v=v), v))
    for country, kind, v in _ids(rng):
        out.append(Sample("personal", kind, country, f"My {kind.upper()} is {v}, for the form.", v))
    for _ in range(10):
        user = _r(rng, _LO, rng.randint(3, 9)) + rng.choice(("", ".", "_", "+")) + _r(rng, _LO, 4)
        v = f"{user}@{_r(rng, _LO, 6)}.{rng.choice(('com', 'de', 'co.uk', 'fr', 'io', 'com.br'))}"
        out.append(Sample("personal", "email", "", f"send the invoice to {v} please", v))
    return out


def benign(seed: int) -> list[Sample]:
    """Ordinary chat turns with numbers, dates, code, hashes and credential words but no secret."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not keys
    templates = (
        "The meeting moved to {d} at {h}:{m:02d}, room {n}.",
        "Build {n} took {f:.1f} s; p99 latency was {f:.2f} ms on {n} requests.",
        "Run `pytest -k test_retry -x` and paste the output.",
        "```python\ndef add(a, b):\n    return a + b\n```",
        "for i in range({n}): total += values[i] * {f:.3f}",
        "We shipped v{n}.{m}.{h} on {d}; changelog in CHANGELOG.md.",
        "Reset your password from the account page; the token expires after {n} minutes.",
        "Set the API key in the environment, never in the code.",
        "The secret santa draw is on {d}.",
        "ERROR 1045 (28000): Access denied for user 'root'@'localhost' (using password: YES)",
        "Port {n} is taken; try --port {h}{m:02d} instead.",
        "Commit {x} fixed the flaky test.",
        "Invoice #{n} for {f:.2f} EUR is due {d}.",
        "const total = items.reduce((a, b) => a + b.price, 0); // {n} items",
        "SELECT id, name FROM users WHERE created_at > '{d}' LIMIT {n};",
        "The model used {n} input tokens and {h} output tokens.",
        "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
        "if not token: raise AuthError('missing token')",
        "Add `{{\"retries\": {m}, \"timeout_ms\": {n}}}` to config.json.",
        "Ticket PROJ-{n}: login page shows 'invalid password' twice.",
    )
    out = []
    for i in range(400):
        t = templates[i % len(templates)]
        text = t.format(d=f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", h=rng.randint(1, 23),
                        m=rng.randint(0, 59), n=rng.randint(1, 99999), f=rng.random() * 1000,
                        x=_r(rng, _HEXL, 40))
        out.append(Sample("benign", "chat", "generated", text, ""))
    return out


def held_out(s: Sample) -> bool:
    """Whether a sample's syntax or kind was kept out of tuning."""
    return s.syntax in HELD_OUT_SYNTAX or s.kind in HELD_OUT_KINDS
