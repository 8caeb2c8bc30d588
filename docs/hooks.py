"""MkDocs hooks: the command-line reference is generated from the real parser, and the build warns
(so ``mkdocs build --strict`` fails) on a flag without help text, a public name without a
docstring, and a public name the API reference leaves out. Nothing here can go stale by hand."""

from __future__ import annotations

import argparse
import inspect
import logging
import re

log = logging.getLogger("mkdocs.hooks.prmsearch")

CLI_MARKER = "<!-- prmsearch-cli-reference -->"
API_PAGE = "reference/api.md"
#: Modules whose ``__all__`` is the public Python API: each name must be on the API page.
PUBLIC_MODULES = ("prmsearch", "prmsearch.benchmarks", "prmsearch.conformance")


def _flag_names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    shown = []
    for flag in action.option_strings:
        takes_value = action.nargs != 0
        metavar = action.metavar or action.dest.upper()
        shown.append(f"`{flag} {metavar}`" if takes_value else f"`{flag}`")
    return ", ".join(shown)


def _default(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    value = parser.get_default(action.dest)
    if value is None or value is False or value == [] or value == () or action.nargs == 0:
        return ""
    if isinstance(value, (tuple, list)):
        value = ",".join(str(v) for v in value)
    text = str(value).encode("unicode_escape").decode("ascii")
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of every subcommand, in the order ``--help`` lists them."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def cli_reference() -> str:
    """Markdown for every ``prmsearch`` subcommand and flag, read from the parser itself."""
    from prmsearch.cli import build_parser

    parser = build_parser()
    lines = [f"```text\n{parser.format_usage().strip()}\n```", "", parser.description or "", ""]
    options = [a for a in parser._actions
               if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if options:
        lines += ["Options of `prmsearch` itself, given before the command:", "",
                  "| argument | default | what it does |", "|---|---|---|"]
        for action in options:
            help_text = _cell(action.help or "")
            lines.append(f"| {_flag_names(action)} | {_default(action, parser)} | {help_text} |")
        lines.append("")
    for name, summary, sub in _subcommands(parser):
        lines += [f"## prmsearch {name}", "", _cell(summary).rstrip(".") + ".", ""]
        if sub.description and sub.description != summary:
            lines += [" ".join(sub.description.split()), ""]
        lines += [f"```text\n{sub.format_usage().strip()}\n```", ""]
        lines += ["| argument | default | what it does |", "|---|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                log.warning("prmsearch %s: %s has no help text; add help= to its add_argument",
                            name, "/".join(action.option_strings) or action.dest)
            help_text = (action.help or "") % {"default": parser.get_default(action.dest)} \
                if action.help and "%(" in action.help else (action.help or "")
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                help_text += f" (one of: {', '.join(map(str, action.choices))})"
            lines.append(f"| {_flag_names(action)} | {_default(action, sub)} | {_cell(help_text)} |")
        lines.append("")
    return "\n".join(lines)


def _public_names() -> list[tuple[str, str, object]]:
    import importlib

    names = []
    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            log.warning("public module %s does not import", module_name)
            continue
        for name in getattr(module, "__all__", ()):
            names.append((module_name, name, getattr(module, name)))
    return names


def check_api_page(markdown: str) -> None:
    """Warn for every public name without a docstring or without an entry on the API page."""
    documented = set(re.findall(r"^:::\s*([\w.]+)", markdown, flags=re.MULTILINE))
    for module_name, name, obj in _public_names():
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
            log.warning("%s.%s has no docstring", module_name, name)
        if f"{module_name}.{name}" not in documented:
            log.warning("%s.%s is public (in __all__) but not on %s: add '::: %s.%s'",
                        module_name, name, API_PAGE, module_name, name)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if page.file.src_uri == API_PAGE:
        check_api_page(markdown)
    return markdown
