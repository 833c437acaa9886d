"""The package list, found rather than written by hand: every package below the three folders
that pyproject.toml maps under ``agentledger`` (a hand-written list once left a service out)."""

from setuptools import find_packages, setup

ROOTS = {"agentledger": "src/agentledger", "agentledger.contracts": "contracts",
         "agentledger.services": "services"}

setup(packages=[name for root, folder in ROOTS.items()
                for name in (root, *(f"{root}.{p}" for p in find_packages(folder)))])
