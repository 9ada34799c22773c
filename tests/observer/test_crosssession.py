"""Threshold synthesis with a model that answers: what of its answer is kept."""

from __future__ import annotations

import json

import pytest

from apps.memories.models import Memory
from apps.observer.models import SynthesisLog
from apps.observer.traces import Trace

pytestmark = pytest.mark.django_db(transaction=False)


def five_sessions(agent):
    for i in range(5):
        agent.run(Trace().read("shop/orders/models.py").edit("shop/orders/views.py").read(f"docs/{i}.md"))
    return SynthesisLog.objects.get(module="shop/orders", trigger="5")


def answer(*items):
    return json.dumps({"memories": list(items)})


def test_malformed_items_in_the_answer_are_skipped_and_the_good_ones_kept(agent, fake_openai):
    """A null related_files, a word for a confidence or a list for a type raised outside the
    `try`: the whole synthesis rolled back, its log too, and no template ran."""
    fake_openai.answer = answer(
        {"type": "gotcha", "content": "Orders lock the cart row", "related_files": None},
        {"type": "gotcha", "content": "Confidence in words", "confidence": "high"},
        {"type": ["gotcha"], "content": "A type in a list"},
        {"type": "gotcha", "content": "A bare string of files", "related_files": "shop/orders/views.py"},
        {"type": "module_insight", "content": "Orders own the checkout state machine",
         "related_files": ["shop/orders/models.py"], "confidence": 0.8},
    )  # fmt: skip
    log = five_sessions(agent)
    assert log.used_llm
    kept = {m.content: m for m in Memory.objects.filter(type__in=["gotcha", "module_insight"])}
    assert set(kept) == {"Orders lock the cart row", "Orders own the checkout state machine"}
    assert kept["Orders lock the cart row"].related_files == []
    assert kept["Orders own the checkout state machine"].related_files == ["shop/orders/models.py"]
    assert log.memories_created == 2


def test_an_answer_with_no_usable_item_falls_back_to_the_templates(agent, fake_openai):
    fake_openai.answer = answer(
        {"type": "gotcha", "content": "Confidence in words", "confidence": "high"},
        {"type": "gotcha", "content": "Files in a string", "related_files": "shop/orders/views.py"},
        {"type": "gotcha", "content": "Files not strings", "related_files": [1, 2]},
        {"type": "gotcha", "content": "A confidence too big for a float", "confidence": 10**400},
        {"type": "gotcha", "content": "A yes for a confidence", "confidence": True},
    )
    log = five_sessions(agent)
    assert log.used_llm
    (insight,) = Memory.objects.filter(type="module_insight")
    assert "work here centres on" in insight.content and "shop/orders/models.py" in insight.content
    assert not Memory.objects.filter(type="gotcha").exists()
