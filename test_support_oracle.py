"""Test support, no tests: the official-template oracle, the one place a test renders an official chat template,
sharing no code with tokenizer.py or tool_formats.py.

Gemma 4 E2B's official template is the prepared Hub copy when prepare.py fetched one, else
../shared/gemma-4-E2B-it/chat_template.jinja; every other counter's is the chat_template.jinja its prepared folder
keeps. official renders one as transformers' apply_chat_template does (compiled: its jinja2 environment and its own
tojson), with the counter's fixed inputs; official_count encodes that prompt with the tokenizers library straight
from the counter folder's tokenizer.json.
"""
import datetime
from functools import lru_cache
import json
from pathlib import Path
import unittest

from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from prepared_folder import DEFAULT, PREPARED, TEMPLATE_FILE, counter_folder

HERE = Path(__file__).resolve().parent  # the lab's folder
# tokenizer-manifest.json as json reads it, not through prepared_folder.read_manifest, which a test holds to it
MANIFEST = json.loads((HERE / 'tokenizer-manifest.json').read_text(encoding='utf-8'))
# The counters whose templates render tool messages (SmolLM2's as any other message; its prepared template is its
# GGUF's)
TOOL_FAMILIES = ('gemma-4-e2b', 'llama-3.1', 'llama-3.2', 'llama-3.3', 'qwen-2.5', 'smollm2-135m')


def oracle_template_path() -> Path | None:
    for path in (PREPARED / 'chat_template.jinja', HERE.parent / 'shared' / 'gemma-4-E2B-it' / 'chat_template.jinja'):
        if path.is_file():
            return path
    return None


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """transformers' chat-template tojson (chat_template_utils: json.dumps with these five arguments and these
    defaults), not jinja2's own filter, which escapes non-ASCII and HTML characters: text stays as written and
    indent= is honoured (Llama's tools list is written with indent=4)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compiled(template: str):
    """A chat template compiled in an environment set up as transformers' apply_chat_template sets it: a sandbox with
    trim_blocks, lstrip_blocks and loopcontrols, raise_exception, strftime_now (Llama 3.2's template would write
    today's date with it, were date_string not given), and transformers' own tojson."""
    def raise_exception(message):
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.globals.update(raise_exception=raise_exception,
                               strftime_now=lambda form: datetime.date.today().strftime(form))
    environment.filters['tojson'] = tojson
    return environment.from_string(template)


def template_path(name: str = DEFAULT) -> Path | None:
    """The counter's official template, or None where it is not at hand."""
    path = OFFICIAL_PATH if name == DEFAULT else counter_folder(name) / TEMPLATE_FILE
    return path if path is not None and path.is_file() else None


@lru_cache(maxsize=None)
def official_template(name: str = DEFAULT):
    """The counter's official template, compiled once; without it the test skips (a reader's clone has no ../shared,
    whose copy of Gemma 4's template is the oracle, and a counter folder may not be prepared)."""
    if (path := template_path(name)) is None:
        raise unittest.SkipTest(f'no copy of the official {name} template to compare with')
    return compiled(path.read_text(encoding='utf-8'))


def official(name: str, messages: list[dict], tools=None) -> str:
    """The prompt the counter's official template renders for these messages and tools, with the inputs the lab
    fixes for it (Gemma 4: bos_token and thinking off; the others: their manifest's fixed_inputs)."""
    fixed = {'bos_token': '<bos>', 'enable_thinking': False} if name == DEFAULT \
        else MANIFEST['counters'][name].get('fixed_inputs', {})
    return official_template(name).render(messages=messages, tools=tools, add_generation_prompt=True, **fixed)


def official_render(messages: list[dict], name: str = DEFAULT) -> str:
    """A request as the lab carries it rendered by the official template: an agent request's tools, which the lab
    carries on its system message, go in as the template's tools."""
    tools = messages[0].get('tools') if messages else None
    return official(name, [{key: value for key, value in message.items() if key != 'tools'} for message in messages],
                    tools)


@lru_cache(maxsize=None)
def official_tokenizer(name: str = DEFAULT) -> Tokenizer:
    """The counter folder's tokenizer.json loaded by the tokenizers library itself, not through tokenizer.py."""
    return Tokenizer.from_file(str(counter_folder(name) / 'tokenizer.json'))


def official_count(messages: list[dict], name: str = DEFAULT) -> int:
    """Tokens of the prompt the official template renders, encoded as transformers' apply_chat_template
    encodes it (special-token text becomes its id; nothing is added): the oracle's count, sharing no code
    with tokenizer.py. official_count of dev-correction's bare request -> 35."""
    return len(official_tokenizer(name).encode(official_render(messages, name), add_special_tokens=False).ids)


OFFICIAL_PATH = oracle_template_path()


OFFICIAL_TEMPLATE = OFFICIAL_PATH.read_text(encoding='utf-8') if OFFICIAL_PATH else None


NO_ORACLE = 'neither prepared/chat_template.jinja nor ../shared/gemma-4-E2B-it/chat_template.jinja exists'
