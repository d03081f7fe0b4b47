"""Test support, no tests: the official-template oracle, sharing no code with tokenizer.py.

The official Gemma 4 E2B chat template is an oracle only: the prepared Hub copy when prepare.py fetched one, else
../shared/gemma-4-E2B-it/chat_template.jinja. official_render renders it as transformers' apply_chat_template does,
and official_count encodes that prompt with the tokenizers library straight from prepared/tokenizer.json.
"""
import datetime
from functools import lru_cache
import json
from pathlib import Path

from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from prepared_folder import PREPARED

HERE = Path(__file__).parent


def oracle_template_path() -> Path | None:
    for path in (PREPARED / 'chat_template.jinja', HERE.parent / 'shared' / 'gemma-4-E2B-it' / 'chat_template.jinja'):
        if path.is_file():
            return path
    return None


def compiled(template: str):
    """A chat template compiled in an environment set up as transformers' apply_chat_template sets it: a sandbox with
    trim_blocks, lstrip_blocks and loopcontrols, raise_exception, strftime_now (Llama 3.2's template would write
    today's date with it, were date_string not given), and transformers' own tojson, which keeps non-ASCII text and
    honours indent= (Llama's tools list is written with indent=4)."""
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):  # transformers' filter
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.globals.update(raise_exception=raise_exception,
                               strftime_now=lambda form: datetime.date.today().strftime(form))
    environment.filters['tojson'] = tojson
    return environment.from_string(template)


@lru_cache(maxsize=1)
def official_template():
    """The official Gemma 4 template, compiled once."""
    return compiled(OFFICIAL_TEMPLATE)


def official_render(messages: list[dict]) -> str:
    """Render with the official template the way transformers' apply_chat_template does; an agent request's tools,
    which the lab carries on its system message, go in as the template's tools."""
    tools = messages[0].get('tools') if messages else None
    messages = [{key: value for key, value in message.items() if key != 'tools'} for message in messages]
    return official_template().render(messages=messages, tools=tools, bos_token='<bos>', add_generation_prompt=True,
                                      enable_thinking=False)


@lru_cache(maxsize=1)
def official_tokenizer() -> Tokenizer:
    """prepared/tokenizer.json loaded by the tokenizers library itself, not through tokenizer.py."""
    return Tokenizer.from_file(str(PREPARED / 'tokenizer.json'))


def official_count(messages: list[dict]) -> int:
    """Tokens of the prompt the official template renders, encoded as transformers' apply_chat_template
    encodes it (special-token text becomes its id; nothing is added): the oracle's count, sharing no code
    with tokenizer.py. official_count of dev-correction's bare request -> 35."""
    return len(official_tokenizer().encode(official_render(messages), add_special_tokens=False).ids)


OFFICIAL_PATH = oracle_template_path()


OFFICIAL_TEMPLATE = OFFICIAL_PATH.read_text(encoding='utf-8') if OFFICIAL_PATH else None


NO_ORACLE = 'neither prepared/chat_template.jinja nor ../shared/gemma-4-E2B-it/chat_template.jinja exists'
