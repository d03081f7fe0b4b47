"""The lab's Ollama client, at OLLAMA_HOST: OllamaClient(model).answer(answer_model.chat_body(model, messages, ...))

It checks that the server is Ollama and holds the pinned digest; a reply must name the pinned tag and hold what a
recording accepts, within a deadline for the whole reply. Each failure is one OllamaError line naming the host. It
writes nothing, pulls nothing, and uses no stream, retry, redirect or proxy. Its ServerClient holds what
openai_client.py's client shares with it: the bounded request, and the check of a chat reply's fields.
"""
from datetime import date
import ipaddress
import json
import os
import shutil
import threading
from urllib.parse import urlsplit

from answer_model import ANSWER_CHECKS, MODEL_CHECKS, encode, new_pin_counter, undercounts_cached_prompt
from common import LabError, tell
from text import clipped, excerpt

WIRE_NAMES = {'answer': 'message.content', 'tool_calls': 'message.tool_calls', 'done_reason': 'done_reason',
              'prompt_tokens': 'prompt_eval_count', 'answer_tokens': 'eval_count'}  # each field in an /api/chat reply
DEFAULT_HOST = 'http://127.0.0.1:11434'  # the address ollama serve listens on by default
DEFAULT_PORT = 11434
SCHEME_PORTS = {'http': 80, 'https': 443}  # an OLLAMA_HOST with a scheme and no port means the scheme's port
LOOPBACK = {4: '127.0.0.1', 6: '::1'}  # what an unspecified bind address (0.0.0.0, ::) means to a client
# Each is a deadline for the whole reply, not for each read, so a server that trickles is stopped too.
CHECK_TIMEOUT = 10.0  # seconds; /api/version, /api/tags, /api/show and /api/ps answer at once on a live server
CHAT_TIMEOUT = 600.0  # seconds; the first chat loads the weights, which can take minutes on a CPU
BODY_QUOTED = 80  # characters of an unexpected reply body quoted in a message
REPLY_LIMIT = 4 << 20  # bytes of a reply once decompressed; Ollama's largest, /api/show's, takes tens of KB
DETAILS = {'publisher_model': 'family', 'quantization': 'quantization_level', 'parameters': 'parameter_size'}  # pin
UNSTATED = 'not stated by the server'  # a pin's field where /api/show says nothing


class OllamaError(LabError):
    """The server, or what it holds or answered, is not what the pinned model needs; the message says what to do."""


def ip_address(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def ollama_host(value: str | None) -> str:
    """OLLAMA_HOST's base URL, read as the official ollama Python client reads it, and 0.0.0.0 or :: as loopback:
    ':56789' -> 'http://127.0.0.1:56789'; '0.0.0.0' -> 'http://127.0.0.1:11434'."""
    value = value or ''
    scheme, _, hostport = value.partition('://')
    port = SCHEME_PORTS.get(scheme, DEFAULT_PORT)
    if not hostport:
        scheme, hostport, port = 'http', value, DEFAULT_PORT
    address, slash, path = hostport.partition('/')
    if (bare := ip_address(address)) is not None and bare.version == 6:  # such as ::, as the server accepts it
        hostport = f'[{address}]{slash}{path}'
    try:
        parts = urlsplit(f'{scheme}://{hostport}')
        port = parts.port or port
    except ValueError as error:  # a port that is not a number, or a bracket left open
        raise OllamaError(f'OLLAMA_HOST={value!r} cannot be read as an address ({error}): '
                          f'set it like {DEFAULT_HOST}') from None
    host = parts.hostname or '127.0.0.1'
    if (ip := ip_address(host)) is not None:
        host = LOOPBACK[ip.version] if ip.is_unspecified else host
        host = f'[{host}]' if ip.version == 6 else host  # urlsplit drops the brackets IPv6 needs in a URL
    path = parts.path.strip('/')
    return f'{scheme}://{host}:{port}' + (f'/{path}' if path else '')


def reply_detail(body: str, payload: dict | None) -> str:
    """What a reply said, for a message: its error (Ollama's string, or the message of an OpenAI-compatible server's
    object), else its body quoted and cut short, or 'an empty body'."""
    error = payload.get('error') if payload is not None else None
    error = error.get('message') if isinstance(error, dict) else error
    if isinstance(error, str):
        return error
    text = clipped(' '.join(body.split()), BODY_QUOTED)
    return f'the body "{text}"' if text else 'an empty body'


def pull_advice(tag: str, digest: str | None) -> str:
    """How to get the pinned build of tag: `ollama pull`, then (once pinned) the digest `ollama list` must show."""
    return f'run `ollama pull {tag}`' + (f', then check that the ID column of `ollama list` starts with {digest[:12]}, '
                                         'the pinned build' if digest else '')


def find_tag(listed, tag: str) -> dict | None:
    """The entry for tag in a model list of /api/tags or /api/ps, which name it under name or model."""
    entries = listed if isinstance(listed, list) else []
    return next((m for m in entries if isinstance(m, dict) and tag in (m.get('name'), m.get('model'))), None)


class ServerClient:
    """What both clients share: requests with a deadline for the whole reply, bounded, never redirected, and the check
    of a chat reply. A client names its server (SERVER), where its address is set (ADDRESS, like EXAMPLE), its error
    class (ERROR), and which replies fail (_checked)."""
    SERVER, ADDRESS, EXAMPLE, ERROR = 'Ollama', 'OLLAMA_HOST', DEFAULT_HOST, OllamaError

    def __init__(self, model: dict, host: str):
        import requests  # here, not at the top: a missing package is then common.run's one line
        self.model, self.host, self.checked = model, host, None  # checked: the model block once the server passed
        self.session = requests.Session()
        self.session.trust_env = False  # the server is local: a proxy from the environment must not carry requests

    def headers(self) -> dict:
        return {}

    def unreachable(self) -> str:
        return f'nothing answers at {self.host}: start the server, or set {self.ADDRESS} to the address it listens on'

    def checked_reply(self, path: str, named, body: dict, reply: dict, wire_names: dict, advice: str = '') -> dict:
        """reply, once the server named the model body asked for and each field holds what a recording accepts
        (wire_names: where the server sent it); else one self.ERROR ending in advice, and nothing of it is kept."""
        if named != body['model']:
            raise self.ERROR(f'{self.SERVER} at {self.host} answered for the model {excerpt(named)}, not the pinned '
                             f'{body["model"]}, so nothing from it is kept: check what serves at {self.ADDRESS}')
        for field, wire in wire_names.items():
            if not ANSWER_CHECKS[field][0](reply[field]):
                raise self.ERROR(f'{self.SERVER} at {self.host} answered {path} with {wire} {excerpt(reply[field])}, '
                                 f'where an answer needs {ANSWER_CHECKS[field][1]}, so nothing from it is kept{advice}')
        return reply

    def _fetch(self, path: str, data: bytes | None, timeout: float) -> tuple:
        """(response, its body inflated to REPLY_LIMIT + 1 bytes at most) within timeout seconds, or one self.ERROR."""
        import requests
        from urllib3.exceptions import HTTPError, ProtocolError
        done: dict = {}

        def send() -> None:  # in a thread of its own, so that a reply trickling in cannot outlast the deadline
            try:  # no redirect is followed: its target's build is unchecked
                done['response'] = response = self.session.request(
                    'POST' if data else 'GET', self.host + path, data=data, timeout=timeout, stream=True,
                    allow_redirects=False,
                    headers={**self.headers(), **({'Content-Type': 'application/json'} if data else {})})
                with response:  # inflated only up to the limit, so a small compressed body cannot fill the memory
                    done['body'] = response.raw.read(REPLY_LIMIT + 1, decode_content=True)
            except BaseException as error:  # raised below, in the caller's thread
                done['error'] = error
        worker = threading.Thread(target=send, daemon=True)
        worker.start()
        worker.join(timeout)
        error = requests.Timeout() if worker.is_alive() else done.get('error')
        cause = error.args[0] if isinstance(error, requests.RequestException) and error.args else error
        if isinstance(error, requests.Timeout):
            raise self.ERROR(f'{self.SERVER} at {self.host} did not answer {path} within {timeout:g} s: '
                             'check that the server is not stuck or overloaded, then run again')
        if isinstance(cause, ProtocolError):  # it accepted the connection, then closed it before the reply ended
            raise self.ERROR(f'{self.SERVER} at {self.host} broke off its reply to {path} ({cause.args[0]}): '
                             'run again, and read the server log if it happens again')
        if isinstance(error, requests.ConnectionError):
            raise self.ERROR(self.unreachable())
        if isinstance(error, HTTPError):  # such as a body that does not decompress
            raise self.ERROR(f'{self.SERVER} at {self.host} sent a reply to {path} that cannot be read '
                             f'({error.args[0]})')
        if isinstance(error, requests.RequestException):
            raise self.ERROR(f'cannot send a request to {self.host} ({error}): set {self.ADDRESS} like {self.EXAMPLE}')
        if error is not None:
            raise error
        return done['response'], done['body']

    def _call(self, path: str, data: bytes | None = None, timeout: float | None = None) -> dict:
        """One request whose answer must be a JSON object, within timeout (else CHECK_TIMEOUT, read at the call);
        every way it can fail is one self.ERROR (the client's _checked says which replies fail)."""
        return self._checked(path, *self._send(path, data, timeout or CHECK_TIMEOUT))

    def _send(self, path: str, data: bytes | None, timeout: float) -> tuple[int, str, dict | None]:
        """(status, body, the body if a JSON object); a reply too large or a redirect is one self.ERROR."""
        response, body = self._fetch(path, data, timeout)
        if len(body) > REPLY_LIMIT:
            raise self.ERROR(f'{self.SERVER} at {self.host} answered {path} with more than {REPLY_LIMIT >> 20} MiB '
                             f'once decompressed, so the reply was refused: check what serves at {self.ADDRESS}')
        if response.is_redirect:
            raise self.ERROR(f'{self.SERVER} at {self.host} answered {path} with HTTP {response.status_code}, a '
                             f'redirect to {response.headers["Location"]}, which the lab never follows: set '
                             f'{self.ADDRESS} to the server that answers itself')
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # not JSON at all, or nested too deeply to read
            payload = None
        return response.status_code, body.decode('utf-8', 'replace'), payload if isinstance(payload, dict) else None


class OllamaClient(ServerClient):
    def __init__(self, model: dict):
        super().__init__(model, ollama_host(os.environ.get('OLLAMA_HOST')))
        self.version: str | None = None  # set once verify() has passed

    def unreachable(self) -> str:
        # Without the ollama command there is nothing to start: say so before the start advice.
        install = ('' if shutil.which('ollama') else
                   ', and no `ollama` command is on PATH: install Ollama (from its download page), then')
        return (f'no Ollama server answers at {self.host}{install or ":"} start it with `ollama serve`, or set '
                'OLLAMA_HOST to the address it listens on')

    def checked_model(self) -> dict:
        """The model block a recording keeps: the pin with the server's version, the digest checked; noted once."""
        if self.checked is None:
            version, pinned = self.verify(), self.model['ollama_version']
            if version != pinned:
                tell(f'note: the server is Ollama {version}, not the pinned {pinned}, with the pinned digest; it is '
                     'recorded.')
            if undercounts_cached_prompt(version):
                tell(f'note: Ollama {version} leaves cached prompt tokens out of prompt_eval_count, so the second '
                     'and later seeds of each request will show as prompt-token mismatches; grading marks them so.')
            self.checked = {**self.model, 'ollama_version': version}
        return self.checked

    def holds(self) -> str:
        """What check prints once the server holds the pinned build."""
        return (f'Ollama {self.verify()} at {self.host} has {self.model["ollama_tag"]} '
                f'with the pinned digest {self.model["ollama_digest"]}')

    def count(self, body: dict) -> None:
        """Ollama cannot count a request without answering it: record compares prompt_eval_count after."""
        return None

    def verify(self) -> str:
        """Check the server and the pinned digest once; return the server's version."""
        if self.version is None:
            version, tag = self.server_version(), self.model['ollama_tag']
            self.tag_digest(f'the tag has moved (`ollama pull {tag}` fetches whatever it points to today), '
                            'and answers from a new build need a deliberate change of the pin file and a new '
                            'recording; no chat request was sent')
            self.version = version
        return self.version

    def server_version(self) -> str:
        status, body, payload = self._send('/api/version', None, CHECK_TIMEOUT)
        version = payload.get('version') if payload is not None else None
        if status != 200 or not isinstance(version, str) or not version:
            raise OllamaError(f'the server at {self.host} is not Ollama: it answered /api/version with HTTP {status} '
                              f'({reply_detail(body, payload)}), where Ollama gives its version; set OLLAMA_HOST to '
                              f'the address `ollama serve` listens on (by default {DEFAULT_HOST})')
        return version

    def tag_digest(self, moved: str = '') -> str | None:
        """The tag's digest in /api/tags, refused unless it is the pinned one, if any (moved: what another means)."""
        tag, expected = self.model['ollama_tag'], self.model['ollama_digest']  # None while pinning
        entry = find_tag(self._call('/api/tags').get('models'), tag)
        if entry is None:
            raise OllamaError(f'Ollama at {self.host} has no {tag}: {pull_advice(tag, expected)}')
        if (digest := entry.get('digest')) != expected and expected is not None:
            raise OllamaError(f'Ollama at {self.host} has {tag} with digest {digest}, but the pinned build '
                              f'is {expected}: {moved}')
        return digest

    def answer(self, body: dict) -> dict:
        """The pinned build's answer to a chat_body (message.content, not thinking), checked; the digest read again."""
        self.verify()
        payload = self._call('/api/chat', encode(body), CHAT_TIMEOUT)
        if payload.get('done') is not True:
            # Even with stream false the server answers 200 with what it has when generation ends
            # without a final response (it does so after one token repeats many times): no counts.
            raise OllamaError(f'Ollama at {self.host} stopped before finishing the reply (done is '
                              f'{json.dumps(payload.get("done"))}), so nothing from it is kept: run again, '
                              'and read the server log if it happens again')
        message = payload['message'] if isinstance(payload.get('message'), dict) else {}
        # Ollama leaves out a count that is zero.
        reply = {'seed': body['options']['seed'], 'answer': message.get('content'),
                 'tool_calls': message.get('tool_calls') or [], 'done_reason': payload.get('done_reason'),
                 'prompt_tokens': payload.get('prompt_eval_count', 0), 'answer_tokens': payload.get('eval_count', 0)}
        # Ollama names the tag it was asked for in every reply.
        self.checked_reply('/api/chat', payload.get('model'), body, reply, WIRE_NAMES,
                           ': upgrade Ollama or read its log')
        # Read after every answer, so that each lies between two reads of the pinned digest.
        self.tag_digest('the tag moved while this answer was made, so it is not kept')
        return reply

    def pin(self, options: dict, seeds: list[int], counter: str | None = None) -> dict:
        """A pin of the client's tag as /api/show describes it now, with these options, seeds and counter asked for."""
        version, digest, tag = self.server_version(), self.tag_digest(), self.model['ollama_tag']
        about = self._call('/api/show', encode({'model': tag}))
        details = about['details'] if isinstance(about.get('details'), dict) else {}
        text = about['license'] if isinstance(about.get('license'), str) and about['license'].strip() else UNSTATED
        pinned = {'checked_on': date.today().isoformat(), 'license': text.strip().splitlines()[0][:BODY_QUOTED],
                  **{field: str(details.get(name) or UNSTATED)[:BODY_QUOTED] for field, name in DETAILS.items()},
                  'ollama_tag': tag, 'ollama_digest': digest, 'ollama_version': version, 'options': options,
                  'think': False, 'trials': len(seeds), 'seeds': seeds}
        return {**{field: pinned[field] for field in MODEL_CHECKS},  # in answer-model.json's order
                'counter': new_pin_counter(tag, pinned['publisher_model'], counter)}

    def loaded_context_length(self) -> int | None:
        """The context /api/ps says the tag was loaded with; None where it says none (0, or before 0.9.7)."""
        length = (find_tag(self._call('/api/ps').get('models'), self.model['ollama_tag']) or {}).get('context_length')
        return length if type(length) is int and length > 0 else None

    def _checked(self, path: str, status: int, body: str, payload: dict | None) -> dict:
        """payload, unless the reply is an error or not a JSON object; each is one OllamaError."""
        error = payload.get('error') if payload is not None else None
        detail = reply_detail(body, payload)
        if status == 404 and path == '/api/chat' and error is not None:
            raise OllamaError(f'Ollama at {self.host} answered 404 to {path} ({error}): '
                              f'{pull_advice(self.model["ollama_tag"], self.model["ollama_digest"])}')
        if status == 503:
            raise OllamaError(f'Ollama at {self.host} is busy (503: {detail}): wait for its other requests to end')
        if status == 400:
            raise OllamaError(f'Ollama at {self.host} rejected {path} as a bad request ({detail}): '
                              f'upgrade Ollama; the pinned recording used {self.model["ollama_version"]}')
        if status != 200 or error is not None:
            raise OllamaError(f'Ollama at {self.host} answered HTTP {status} to {path} ({detail}): read the server log')
        if payload is None:
            raise OllamaError(f'{self.host}{path} did not answer with a JSON object: check that OLLAMA_HOST is Ollama')
        return payload
