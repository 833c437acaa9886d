"""Token formats with a public prefix or shape, beyond the ones ``secrets`` names itself.

Why a table of its own: the established scanners (gitleaks' rule set, trufflehog's detectors)
publish the shape of each provider's tokens, and those shapes are facts about the providers;
a detector that knows only the formats its authors happened to meet misses the rest. These
patterns are ours, written from those published shapes (the prefix, the alphabet, the length)
and checked against fake tokens generated to match each one (``bench-data/detect``).

A format is listed only when its prefix tells it apart from ordinary text (``gsk_`` and 52
characters, ``dt0c01.`` and two dotted parts); a shape with no prefix (32 hex characters)
is a secret only behind a credential name, which ``secrets`` handles, and public keys
(Flutterwave's ``FLWPUBK``, Mailgun's ``pubkey-``, Mapbox's ``pk.``) are not secrets.

Each entry is (kind, anchors, body): the body is matched between token boundaries, and runs
only when one of its anchors is in the text (see ``secrets._Rules``).
"""

from __future__ import annotations

PREFIXED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("onepassword_secret_key", ("A3-",),
     r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}"),
    ("onepassword_token", ("ops_eyJ",), r"ops_eyJ[A-Za-z0-9+/]{250,}={0,3}"),
    ("artifactory_token", ("AKCp",), r"AKCp[A-Za-z0-9]{69}"),
    ("artifactory_token", ("cmVmd",), r"cmVmd[A-Za-z0-9]{59}"),
    ("aws_bedrock_key", ("ABSK",), r"ABSK[A-Za-z0-9+/]{109,269}={0,2}"),
    ("azure_client_secret", ("Q~",), r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"),
    ("clickhouse_key", ("4b1d",), r"4b1d[A-Za-z0-9]{38}"),
    ("clojars_token", ("CLOJARS_",), r"CLOJARS_[A-Za-z0-9]{60}"),
    ("cloudflare_ca_key", ("v1.0-",), r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}"),
    ("dnkey_token", ("dnkey-",), r"dnkey-[a-z0-9=_-]{26}-[a-z0-9=_-]{52}"),
    ("dropbox_token", ("sl.",), r"sl\.[A-Za-z0-9_=-]{135,}"),
    ("duffel_token", ("duffel_test_", "duffel_live_"), r"duffel_(?:test|live)_[A-Za-z0-9_=-]{43}"),
    ("dynatrace_token", ("dt0c01.",), r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("easypost_key", ("EZAK", "EZTK"), r"EZ[AT]K[A-Za-z0-9]{54}"),
    ("facebook_token", ("EAAM", "EAAC"), r"EAA[MC][A-Za-z0-9]{100,}"),
    ("flutterwave_secret", ("FLWSECK",), r"FLWSECK(?:_TEST)?-[a-hA-H0-9]{12,32}(?:-X)?"),
    ("flyio_token", ("fo1_", "fm1a_", "fm1r_", "fm2_"),
     r"(?:fo1_[A-Za-z0-9_-]{43}|fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}|fm2_[A-Za-z0-9+/]{100,}={0,3})"),
    ("frameio_token", ("fio-u-",), r"fio-u-[A-Za-z0-9_=-]{64}"),
    ("gitlab_token", ("glffct-",), r"glffct-[A-Za-z0-9_-]{20}"),
    ("gitlab_token", ("glpat-",), r"glpat-[A-Za-z0-9_-]{27,300}\.[0-9a-z]{9}"),
    ("gitlab_token", ("_gitlab_session=",), r"_gitlab_session=[0-9a-z]{32}"),
    ("grafana_token", ("eyJrIjoi",), r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}"),
    ("groq_key", ("gsk_",), r"gsk_[A-Za-z0-9]{52}"),
    ("harness_token", ("pat.", "sat."), r"(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}"),
    ("heroku_key", ("HRKU-AA",), r"HRKU-AA[A-Za-z0-9_-]{58}"),
    ("huggingface_token", ("api_org_",), r"api_org_[A-Za-z]{34}"),
    ("infracost_token", ("ico-",), r"ico-[A-Za-z0-9]{32}"),
    ("intra42_secret", ("s-s4t2ud-", "s-s4t2af-"), r"s-s4t2(?:ud|af)-[a-f0-9]{64}"),
    ("langsmith_key", ("lsv2_pt_", "lsv2_sk_"), r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}"),
    ("mapbox_secret", ("sk.eyJ",), r"sk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}"),
    ("maxmind_key", ("_mmk",), r"[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk"),
    ("octopus_key", ("API-",), r"API-[A-Z0-9]{26}"),
    ("openshift_token", ("sha256~",), r"sha256~[A-Za-z0-9_-]{43}"),
    ("perplexity_key", ("pplx-",), r"pplx-[A-Za-z0-9]{48}"),
    ("plaid_token", ("access-sandbox-", "access-development-", "access-production-"),
     r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    ("planetscale_token", ("pscale_tkn_", "pscale_oauth_", "pscale_pw_"), r"pscale_(?:tkn|oauth|pw)_[\w=.-]{32,64}"),
    ("prefect_token", ("pnu_",), r"pnu_[A-Za-z0-9]{36}"),
    ("readme_key", ("rdme_",), r"rdme_[a-z0-9]{70}"),
    ("replicate_token", ("r8_",), r"r8_[A-Za-z0-9_-]{37}"),
    ("rubygems_key", ("rubygems_",), r"rubygems_[a-f0-9]{48}"),
    ("scalingo_token", ("tk-us-",), r"tk-us-[A-Za-z0-9_-]{48}"),
    ("sendinblue_key", ("xkeysib-",), r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("settlemint_token", ("sm_aat_", "sm_pat_", "sm_sat_"), r"sm_(?:aat|pat|sat)_[A-Za-z0-9]{16}"),
    ("shippo_token", ("shippo_live_", "shippo_test_"), r"shippo_(?:live|test)_[a-fA-F0-9]{40}"),
    ("slack_token", ("xoxe",), r"xoxe(?:\.xox[bp])?-\d-[A-Za-z0-9]{140,170}"),
    ("sourcegraph_token", ("sgp_",), r"sgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}"),
    ("square_token", ("sq0atp-", "EAAA"), r"(?:EAAA|sq0atp-)[A-Za-z0-9_-]{22,60}"),
    ("stripe_key", ("_prod_", "_live_", "_test_"), r"(?:sk|rk)_(?:prod|live|test)_[A-Za-z0-9]{10,99}"),
    ("teams_webhook", ("webhook.office.com",),
     r"https://[a-z0-9-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/-]{40,}"),
    ("twitter_bearer", ("AAAAAAAAAAAAAAAAAAAAA",), r"A{22}[A-Za-z0-9%]{80,100}"),
    ("typeform_token", ("tfp_",), r"tfp_[A-Za-z0-9_.=-]{59}"),
    ("xai_key", ("xai-",), r"xai-[A-Za-z0-9_]{80}"),
    ("yandex_key", ("AQVN",), r"AQVN[A-Za-z0-9_-]{35,38}"),
)

# Anchors holding a character that ends a token-like run (``~``): looked for in the whole text.
SHORT_ANCHORS = frozenset({"Q~", "sha256~"})
