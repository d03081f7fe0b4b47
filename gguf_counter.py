"""Which of the lab's counters counts a served GGUF model exactly, or one line saying what the lab cannot reproduce.

    .venv/bin/python prepare.py --counter-from MODEL.gguf   # prepares that counter and prints the GGUF's profile

A GGUF holds its own vocabulary and chat template (tokenizer.chat_template), and llama.cpp's server counts with
both. The lab reproduces a GGUF only by recognising it: its template must be, byte for byte, the official template
a counter pins (the counter's format is that template's hand-written rendering, held to it by test_counters.py,
or test_gguf_counter.py for SmolLM2's, the one template pinned from a GGUF), its tokenizer that counter's kind
(byte-level BPE of the same pre-tokenizer, no BOS added), and its tokens, token kinds and merges those of the
counter's prepared tokenizer.json, except at ids whose text the counter refuses to count (its not_counted list); a
counter built from a GGUF (smollm2-135m) is built only from the very file the manifest pins. Anything else is
refused, naming the first difference. It reads the GGUF and the prepared counter only and writes nothing.
"""
import hashlib
import json
from pathlib import Path

from common import LabError
from lab_files import sha256_file

TEMPLATE_KEY = 'tokenizer.chat_template'
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types: a special token, and an added one read as text
ORDINARY = (1, 5, 6)  # normal, unused and byte tokens: what a vocab entry that is not an added token may be


def read_gguf(path: Path) -> dict:
    """The GGUF's tokenizer fields: chat template, tokenizer model, pre-tokenizer, add_bos, tokens, types, merges."""
    from gguf import GGUFReader

    try:
        fields = GGUFReader(path).fields
    except (OSError, ValueError) as error:
        raise LabError(f'{path}: not a readable GGUF file ({error})') from None
    found = {key: fields[f'tokenizer.{key}'].contents() for key in (
        'chat_template', 'ggml.model', 'ggml.pre', 'ggml.add_bos_token', 'ggml.tokens', 'ggml.token_type',
        'ggml.merges') if f'tokenizer.{key}' in fields}
    if missing := [key for key in ('chat_template', 'ggml.model', 'ggml.tokens') if key not in found]:
        raise LabError(f'{path}: the GGUF has no tokenizer.{missing[0]}; the lab cannot count what it serves')
    return found


def counter_for(path: Path, fields: dict, manifest: dict) -> str:
    """The counter whose pinned official template is this GGUF's, and whose kind of tokenizer it has; else one line."""
    template_sha256 = hashlib.sha256(fields['chat_template'].encode('utf-8')).hexdigest()
    known = [name for name, definition in manifest['counters'].items() if 'template' in definition]
    if not (same := [name for name in known if manifest['counters'][name]['template']['sha256'] == template_sha256]):
        raise LabError(f"{path}: its chat template (sha256 {template_sha256}) is none of the official templates the "
                       f"lab's counters reproduce ({', '.join(known)}); refusing to count it")
    name = same[0]  # the first of counters sharing a template (llama-3.1 and -3.3): they count alike
    vocab = manifest['counters'][name]['vocab']
    if (fields['ggml.model'], fields.get('ggml.pre')) != ('gpt2', vocab):
        raise LabError(f"{path}: its tokenizer is {fields['ggml.model']} with pre-tokenizer {fields.get('ggml.pre')}, "
                       f"not the byte-level BPE {vocab} of counter {name}, whose template it has; refusing to count it")
    if fields.get('ggml.add_bos_token'):
        raise LabError(f'{path}: llama.cpp adds a BOS token to its prompts, which counter {name} does not count; '
                       'refusing to count it')
    return name


def vocab_difference(fields: dict, tokenizer_json: Path, refused: list[str]) -> str:
    """'' if the GGUF's tokens, kinds and merges are the prepared tokenizer's (ids whose GGUF text is `refused`
    aside), else the first difference."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    texts = {index: text for text, index in tokenizer.get_vocab(with_added_tokens=True).items()}
    added = tokenizer.get_added_tokens_decoder()
    tokens, types = fields['ggml.tokens'], fields.get('ggml.token_type', [])
    if (len(tokens), len(types)) != (len(texts),) * 2:
        return f'it has {len(tokens)} tokens and {len(types)} token types, the counter {len(texts)} tokens'
    for index, (text, kind) in enumerate(zip(tokens, types)):
        if text in refused and kind == CONTROL:
            continue  # the counter refuses this text, so no count it gives can depend on it
        wanted = ORDINARY if index not in added else (CONTROL,) if added[index].special else (USER_DEFINED,)
        if text != texts.get(index) or kind not in wanted:
            return f'token {index} is {text!r} of type {kind}, the counter has {texts.get(index)!r} there'
    merges = [' '.join(pair) for pair in json.loads(tokenizer.model.__getstate__())['merges']]
    if fields.get('ggml.merges', []) != merges:
        return f"its {len(fields.get('ggml.merges', []))} merges are not the counter's {len(merges)}"
    return ''


def check_vocab(path: Path, fields: dict, tokenizer_json: Path, name: str, definition: dict) -> None:
    if why := vocab_difference(fields, tokenizer_json, definition.get('not_counted', [])):
        raise LabError(f'{path}: its vocabulary is not the one counter {name} counts with ({why}); refusing to '
                       'count it')


def served_profile(path: Path, name: str, counter_profile: dict) -> dict:
    """What a count of this GGUF's requests is pinned to: its name, size and sha256, and the counter's profile."""
    return {'gguf': path.name, 'gguf_size': path.stat().st_size, 'gguf_sha256': sha256_file(path),
            'counter': name, **counter_profile}
