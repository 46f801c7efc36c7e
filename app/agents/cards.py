"""What Switchboard takes from an A2A agent card: its JSON-RPC interface (where A2A
SendMessage goes), its skills (the registry's skill map routes by them) and its
description. Pure: fetching is app/outbound/a2a.py's, storing app/agents/service.py's."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import orjson
from a2a.client.card_resolver import parse_agent_card
from google.protobuf.json_format import ParseError
from pydantic import ValidationError

from app.agents.schemas import AgentSkill, PublishedCard, PublishedSkill
from app.common.jsonbody import decode_json
from app.errors import SwitchboardError
from app.outbound.a2a import A2AInterface, CardInvalid, FetchedCard, jsonrpc_interface

# As many skills as a published card may hold (AgentCard.skills).
MAX_SKILLS = 100
MAX_DESCRIPTION = 2000


@dataclass(frozen=True, slots=True)
class UsableCard:
    """A fetched card as stored: its JSON, skills, description and A2A interface."""

    document: PublishedCard
    skills: list[PublishedSkill]
    description: str
    interface: A2AInterface


def usable_card(fetched: FetchedCard) -> UsableCard:
    """What a discovered card gives the registry; ``CardInvalid`` saying why when it
    cannot be used: no name, no JSON-RPC interface, a skill the registry refuses, or values
    that cannot be stored."""
    card = fetched.card
    if not card.name.strip():
        raise CardInvalid("the card has no name")
    interface = jsonrpc_interface(card)
    if interface is None:
        raise CardInvalid("the card declares no JSON-RPC interface (supportedInterfaces)")
    if len(card.skills) > MAX_SKILLS:
        raise CardInvalid(f"the card declares more than {MAX_SKILLS} skills")
    skills: list[PublishedSkill] = []
    for index, skill in enumerate(card.skills):
        try:
            checked = AgentSkill.model_validate(
                {
                    "id": skill.id,
                    "name": skill.name or skill.id,
                    "description": skill.description,
                    "tags": list(skill.tags),
                    "examples": list(skill.examples),
                }
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise CardInvalid(f"skills[{index}].{where}: {first['msg']}") from None
        skills.append(checked.model_dump(mode="json"))
    if len(card.description) > MAX_DESCRIPTION:
        raise CardInvalid(f"the card's description is longer than {MAX_DESCRIPTION} characters")
    try:
        document = decode_json(orjson.dumps(fetched.document))
    except (SwitchboardError, orjson.JSONEncodeError):
        raise CardInvalid("the card holds values that cannot be stored") from None
    if not isinstance(document, dict):
        raise CardInvalid("the card is not a JSON object")
    return UsableCard(document, skills, card.description, interface)


def published_interface(card: dict[str, Any]) -> A2AInterface | None:
    """The JSON-RPC interface a published card declares in ``supportedInterfaces`` (A2A
    1.0); None for a card without it (the seed's cards: their ``url`` takes the seed's
    JSON request). ``ValueError`` when the member is there but not a valid list of
    interfaces."""
    if "supportedInterfaces" not in card:
        return None
    try:
        parsed = parse_agent_card(copy.deepcopy(card))
    except (ParseError, TypeError, AttributeError) as exc:
        raise ValueError(str(exc)) from None
    return jsonrpc_interface(parsed)
