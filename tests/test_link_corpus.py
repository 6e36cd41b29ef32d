"""Every link in the recorded corpus (tests/link_corpus.py) still opens what it opened when recorded.

Recorded before the pages move into their packages; the move must leave every link's page, widgets,
written-back link and notices as they were. Re-record (`python -m tests.link_corpus`) only for a
change that means to alter what a link opens, and say so in its commit.
"""

from __future__ import annotations

import json

import pytest

from tests.link_corpus import CORPUS, LINKS, snapshot

pytestmark = pytest.mark.model  # the live page's links load the model

RECORDED = json.loads(CORPUS.read_text(encoding="utf-8"))


def test_the_corpus_covers_every_link_listed():
    assert [(r["page"], r["query"]) for r in RECORDED] == [(p, q) for p, q in LINKS]
    assert {r["page"] for r in RECORDED} == {"live", "whatif", "serving", "engines"}


@pytest.mark.parametrize("recorded", RECORDED, ids=[f"{r['page']}-{k}" for k, r in enumerate(RECORDED)])
def test_a_link_opens_what_it_opened(recorded):
    now = json.loads(json.dumps(snapshot(recorded["page"], recorded["query"]), default=str))
    assert now == recorded
