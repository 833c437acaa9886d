"""What people call a password, and how they say what it is, in many languages.

Why a list of words: a password has no shape (any string can be one), so the only thing that
tells it from other text is the word in front of it. A detector that knows "password" in five
languages misses "wachtwoord: …", "hasło: …" and "lösenord är …" (measured on text written
by others, issue 44). The words are the everyday ones (a translation dictionary's first
answer, and the label login forms use), lower-cased as ``str.lower`` writes them.

``FOREIGN_COPULAS`` are the short verbs ("to", "je", "er", "on") that say "is" in some
language and mean something else in English ("send the password to …", "the password on
the note"); they count only after a word of this list, never after an English one.
"""

from __future__ import annotations

# The word for a password (or a PIN-like secret), language by language.
PASSWORD_WORDS: tuple[str, ...] = (
    "wachtwoord",                          # Dutch
    "hasło", "haslo",                      # Polish
    "parola d'ordine", "parola chiave",    # Italian (``password`` is the usual word)
    "parola", "parolă", "parolu",          # Romanian, Turkish
    "şifre", "şifresi", "sifre", "sifresi",  # Turkish
    "lösenord", "losenord",                # Swedish
    "adgangskode", "kodeord", "passord",   # Danish, Norwegian
    "salasana",                            # Finnish
    "heslo",                               # Czech, Slovak
    "jelszó", "jelszo",                    # Hungarian
    "geslo", "lozinka", "lozinku",         # Slovenian, Croatian, Serbian, Bosnian
    "slaptažodis", "slaptazodis",          # Lithuanian
    "parole",                              # Latvian
    "parool", "salasõna",                  # Estonian
    "парола", "пароля", "пароль",          # Bulgarian, Ukrainian, Russian
    "κωδικός", "κωδικός πρόσβασης", "συνθηματικό",  # Greek
    "סיסמה", "סיסמא", "הסיסמה",            # Hebrew
    "كلمة المرور", "كلمة السر", "رمز عبور", "گذرواژه",  # Arabic, Persian
    "पासवर्ड", "कूटशब्द",                  # Hindi
    "mật khẩu", "mat khau",                # Vietnamese
    "รหัสผ่าน",                            # Thai
    "kata sandi", "kata laluan",           # Indonesian, Malay
    "contrasenya", "pasahitza", "contrasinal",  # Catalan, Basque, Galician
    "암호", "비밀번호", "暗証番号", "口令",      # Korean, Japanese, Chinese
    "passcode", "passphrase", "pass phrase", "pin code",
)

# "Is" in the languages above, where it differs from the English and Romance ones that every
# credential word may use (see ``secrets._COPULA``).
FOREIGN_COPULAS: tuple[str, ...] = (
    "to", "je", "er", "on", "är", "ir", "ist", "jest", "é", "è", "es", "este",
    "είναι", "היא", "הוא", "هي", "هو", "است", "है", "là", "คือ", "adalah", "ialah",
)

# A key named by what it is for: in prose its value follows the phrase ("the signing key is …").
KEY_PHRASES: tuple[str, ...] = (
    "api key", "signing key", "encryption key", "decryption key", "secret key", "private key",
    "master key", "hmac key", "access key", "license key", "licence key", "deploy key", "shared key",
    "session key", "webhook key", "root key", "admin key", "service key", "app key", "auth key",
)
