"""Reading OpenAI-style request bodies into one search request, with errors that name the field.

The search comes from the model id (``beam-16``) and the body. Search settings go at the top level
of the body (what the official clients' ``extra_body`` does) or in a ``"prmsearch"`` object:
``strategy``, ``budget`` (the strategy's ``n``: generations to spend) and any option of the
strategy (``width``, ``aggregation``...). OpenAI's own ``n`` keeps its meaning: how many finished
solutions come back as choices. A strategy option whose name OpenAI also uses (particle
filtering's resampling ``temperature``) is only read from the ``"prmsearch"`` object, so a chat
client's sampling temperature never changes the search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prmsearch.search.protocol import STRATEGIES, BoundStrategy, strategy_names, strategy_spec
from prmsearch.serve.catalog import ModelCatalog
from prmsearch.serve.config import ServeConfig
from prmsearch.serve.errors import ApiError, bad_request, malformed

#: OpenAI parameters this server reads.
HONOURED = frozenset({"model", "messages", "prompt", "n", "stream", "stream_options", "seed", "user"})
#: OpenAI parameters accepted and not applied: sampling and length are the server's (set when it
#: starts); each one given is listed in the response's ``prmsearch.ignored``.
IGNORED = frozenset({
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "stop",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "metadata", "store",
    "service_tier", "parallel_tool_calls", "reasoning_effort", "best_of", "suffix", "prediction",
})
#: OpenAI parameters refused unless given their "off" value.
UNSUPPORTED = {
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "web_search_options": (None,),
}
#: Search keys besides the strategy's own options.
SEARCH_KEYS = frozenset({"strategy", "budget"})
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True)
class SearchRequest:
    """One request, read and checked: what to search, how, and what to send back.

    Attributes:
        model: the model id as asked.
        questions: one per chat request; one per prompt of a completions request.
        strategy: the bound strategy (registered name, validated options).
        choices: finished solutions to return per question (OpenAI's ``n``).
        seed: the request's seed (None: the server's seed mixed with the question).
        stream: answer as server-sent events.
        include_usage: with ``stream``, send a last chunk with the usage.
        ignored: OpenAI parameters given that this server does not apply.
    """

    model: str
    questions: tuple[str, ...]
    strategy: BoundStrategy
    choices: int
    seed: int | None
    stream: bool
    include_usage: bool
    ignored: tuple[str, ...]


def parse_chat(body: Any, catalog: ModelCatalog, config: ServeConfig) -> SearchRequest:
    """A ``/v1/chat/completions`` body: the question is the last user message's text."""
    body = _object(body)
    question = _question_from_messages(_required(body, "messages"))
    return _search_request(body, (question,), catalog, config)


def parse_completion(body: Any, catalog: ModelCatalog, config: ServeConfig) -> SearchRequest:
    """A ``/v1/completions`` body: each prompt (a string or a list of strings) is a question."""
    body = _object(body)
    prompt = _required(body, "prompt")
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = prompt
    else:
        raise malformed("'prompt' must be a string or a non-empty list of strings", "prompt")
    if len(prompts) > config.max_questions:
        raise bad_request(
            f"'prompt' holds {len(prompts)} prompts; at most {config.max_questions} per request", "prompt"
        )
    for index, item in enumerate(prompts):
        if not isinstance(item, str):
            what = "token ids" if isinstance(item, (int, list)) else type(item).__name__
            raise malformed(f"prompt[{index}] is {what}; send the prompt as text", "prompt")
        if not item.strip():
            raise bad_request(f"prompt[{index}] is empty; give the question text", "prompt")
    return _search_request(body, tuple(prompts), catalog, config)


def _search_request(
    body: dict[str, Any], questions: tuple[str, ...], catalog: ModelCatalog, config: ServeConfig
) -> SearchRequest:
    model = _required(body, "model")
    if not isinstance(model, str) or not model:
        raise malformed("'model' must be a model id string (GET /v1/models lists them)", "model")
    for index, question in enumerate(questions):
        if len(question) > config.max_prompt_chars:
            where = "the question" if len(questions) == 1 else f"prompt[{index}]"
            raise ApiError(
                400,
                f"{where} has {len(question)} characters; this server takes at most "
                f"{config.max_prompt_chars}: shorten it",
                param="messages" if "messages" in body else "prompt",
                code="context_length_exceeded",
            )
    _refuse_unsupported(body)
    strategy = _strategy(body, model, catalog)
    choices = _int_field(body, "n", 1)
    if choices < 1 or choices > config.max_choices:
        raise bad_request(f"'n' is {choices}; ask for 1 to {config.max_choices} choices", "n")
    budget = getattr(strategy.config, "n", None)
    if isinstance(budget, int) and budget > config.max_budget:
        raise bad_request(
            f"budget {budget} is above this server's cap of {config.max_budget} generations per request "
            "(its --max-budget); ask for a smaller budget",
            "budget",
        )
    if isinstance(budget, int) and choices > budget:
        raise bad_request(
            f"'n' asks for {choices} solutions but the search generates at most {budget} "
            f"(model {model!r}); ask for fewer choices or a larger budget",
            "n",
        )
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise malformed(f"'seed' must be an integer, got {seed!r}", "seed")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise malformed(f"'stream' must be true or false, got {stream!r}", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise malformed("'stream_options' must be an object", "stream_options")
    ignored = tuple(sorted(k for k in body if k in IGNORED and body[k] is not None))
    return SearchRequest(
        model=model,
        questions=questions,
        strategy=strategy,
        choices=choices,
        seed=seed,
        stream=bool(stream),
        include_usage=bool(options.get("include_usage", False)),
        ignored=ignored,
    )


def _strategy(body: dict[str, Any], model: str, catalog: ModelCatalog) -> BoundStrategy:
    """The bound strategy of the model id, the body's search keys and its ``prmsearch`` object."""
    route = catalog.resolve(model)
    nested = body.get("prmsearch", {})
    if not isinstance(nested, dict):
        raise malformed("'prmsearch' must be an object of search settings", "prmsearch")
    name = nested.get("strategy", body.get("strategy", route.strategy))
    if not isinstance(name, str) or name not in STRATEGIES:
        raise bad_request(
            f"unknown strategy {name!r}; the strategies are {', '.join(strategy_names())}", "strategy"
        )
    spec = strategy_spec(name)
    known = {option for option, _, _ in spec.options()}
    options = dict(route.options) if name == route.strategy else {}
    budget: Any = route.budget
    # Top-level keys: everything that is neither OpenAI's nor, for a name both use, ambiguous.
    for key, value in body.items():
        if key in HONOURED or key in IGNORED or key in UNSUPPORTED or key in ("prmsearch", "strategy"):
            continue
        if key == "budget":
            budget = value
        elif key in known and key != "n":
            options[key] = value
        else:
            raise bad_request(
                f"unrecognized request argument {key!r}: not an OpenAI parameter this server takes nor "
                f"an option of strategy {name!r} (its options: budget, "
                f"{', '.join(sorted(known - {'n'}))})",
                key,
            )
    for key, value in nested.items():
        if key == "strategy":
            continue
        if key in ("budget", "n"):
            budget = value
        elif key in known:
            options[key] = value
        else:
            raise bad_request(
                f"'prmsearch.{key}' is not an option of strategy {name!r}; its options are budget, "
                f"{', '.join(sorted(known - {'n'}))}",
                f"prmsearch.{key}",
            )
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        options["n"] = budget  # not a budget: the config's own check names it
        budget = None
    try:
        return spec.configure(**options) if budget is None else spec.at_budget(budget, **options)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"strategy {name!r} refuses these options ({_show(options)}): {exc}",
                          _culprit(exc, options)) from None


def _question_from_messages(messages: Any) -> str:
    if not isinstance(messages, list):
        raise malformed("'messages' must be a list of {role, content} objects", "messages")
    if not messages:
        raise bad_request("'messages' is empty; send at least one user message with the question",
                          "messages")
    question = None
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise malformed(f"messages[{index}] must be an object with 'role' and 'content'", "messages")
        role = message.get("role")
        if role not in _ROLES:
            raise bad_request(f"messages[{index}].role is {role!r}; use one of {', '.join(sorted(_ROLES))}",
                              "messages")
        if role == "user":
            question = (index, _text(message.get("content"), index))
    if question is None:
        raise bad_request("'messages' has no user message; the last user message is the question",
                          "messages")
    index, text = question
    if not text.strip():
        raise bad_request(f"messages[{index}].content is empty; give the question text", "messages")
    return text


def _text(content: Any, index: int) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(text, str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request(
                    f"messages[{index}].content has a {kind!r} part; this server reads text only", "messages"
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise malformed(f"messages[{index}].content must be a string or a list of text parts", "messages")


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    for key, off in UNSUPPORTED.items():
        if key in body and body[key] not in off:
            raise bad_request(f"'{key}' is not supported by this search server; leave it out", key,
                              code="unsupported_parameter")
    response_format = body.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise bad_request("'response_format' other than text is not supported; leave it out",
                          "response_format", code="unsupported_parameter")


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise malformed("the request body must be a JSON object")
    return body


def _required(body: dict[str, Any], key: str) -> Any:
    if key not in body:
        raise malformed(f"'{key}' is required", key)
    return body[key]


def _int_field(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise malformed(f"'{key}' must be an integer, got {value!r}", key)
    return value


def _show(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{'budget' if k == 'n' else k}={v!r}" for k, v in options.items()) or "none"


def _culprit(exc: BaseException, options: Mapping[str, Any]) -> str | None:
    """The option a strategy's validation error names first (the request field to fix)."""
    text = str(exc)
    for key in options:
        if key != "n" and key in text:
            return key
    return "budget" if "n" in options else None
