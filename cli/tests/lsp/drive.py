#!/usr/bin/env python3
"""Drive one LSP session against a language server and print a normalised summary.

The script plays an editor against a single language server (pylsp or
pyright-langserver), either a child process on stdio (``--io -- CMD ARGS...``)
or a server listening on TCP (``--tcp HOST:PORT``).  It is meant to be run
twice, once against the server directly and once through a proxy that should
be transparent: both runs must print byte-identical JSON.

Session, every step bounded by ``--timeout``:

 1. ``initialize`` (rootUri + workspaceFolders = the workspace, client
    capabilities with workspace.configuration, dynamic didChangeConfiguration
    and didChangeWatchedFiles, publishDiagnostics, hover (markdown,
    plaintext), completion, definition, window.workDoneProgress); records the
    truthy server capability keys and serverInfo.name.
 2. ``initialized``.
 3. Throughout the session, answers server->client requests
    ``workspace/configuration`` (one null per item),
    ``client/registerCapability`` and ``window/workDoneProgress/create``
    (null); records whether each was asked, the registered methods, and
    whether any ``window/logMessage`` arrived.
 4. ``textDocument/didOpen`` of ``mod.py`` (also written to disk).
 5. Waits for ``textDocument/publishDiagnostics`` for ``mod.py`` with a
    non-empty list (pyright's own checks; pylsp's pyflakes plugin, which
    requirements.txt installs).  Records [line, severity, code, message] of the latest list.
 6. ``textDocument/hover`` on the ``greet`` call site: non-null; records
    whether its text mentions ``greet``.
 7. ``textDocument/completion`` after ``os.pa``: sorted labels starting "pa".
 8. ``textDocument/definition`` on the ``greet`` call site: [file, line] pairs.
 9. ``shutdown`` request, ``exit`` notification, then the connection is
    closed.  With ``--io`` the server must exit by itself within
    ``EXIT_GRACE_S`` of ``exit``; its exit code is reported as
    ``server_exit`` (null when it had to be killed).  No such key with --tcp.

Messages are exchanged as plain JSON, not lsprotocol types (see
RawJsonProtocol).  Only facts that are stable from run to run are kept (no paths of the temp
workspace, no counts of log messages, no timings).  Output: one line of JSON
with sorted keys on stdout and exit status 0; on any failure, a message naming
the failed step on stderr and exit status 1.
"""

import argparse
import asyncio
import json
import logging
import pathlib
import sys
import tempfile
from typing import Any, Awaitable, Optional
from urllib.parse import unquote, urlparse

from lsprotocol import converters
from pygls.lsp.client import LanguageClient
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
)

# How long the server process gets to exit by itself after `exit`.
EXIT_GRACE_S = 5.0
# How long closing the connection / reaping pygls tasks may take.
CLOSE_GRACE_S = 5.0

DOC_NAME = "mod.py"
DOC_TEXT = (
    "import os\n"  # line 0
    "\n"
    "\n"
    "def greet(name: str) -> str:\n"  # line 3: definition target
    '    return "hello " + name\n'
    "\n"
    "\n"
    'result = greet("x")\n'  # line 7: call site, `greet` spans columns 9..14
    "undefined_name\n"  # line 8: undefined name (pyright error)
    "os.pa\n"  # line 9: completion after `os.pa` (column 5)
)
CALL_SITE = {"line": 7, "character": 10}
COMPLETION_AT = {"line": 9, "character": 5}

# Per-flavour expectations that the installed servers actually meet.
REQUIRE_NONEMPTY_DIAGNOSTICS = {"pylsp": True, "pyright": True}


class RawJsonProtocol(LanguageServerProtocol):
    """pygls' LSP protocol, minus the lsprotocol (cattrs) typing of messages.

    Every message travels as plain JSON (dicts/lists).  With the installed
    lsprotocol 2025.0.0 + cattrs 26.x, typed structuring breaks on real
    server answers (pylsp's `notebookDocumentSync` in the initialize result:
    "Unsupported type ... NotebookDocumentFilter...") and pygls then drops the
    response, so the request hangs.  Raw JSON also shows exactly what was on
    the wire, which is what a transparency check wants.
    """

    def get_message_type(self, method: str):
        return None

    def get_result_type(self, method: str):
        return None


def raw_json_converter():
    """pygls' converter, except untyped payloads stay dicts/lists.

    (pygls' default turns them into namedtuples, renaming keys such as "$".)
    """
    converter = converters.get_converter()
    for envelope in (JsonRPCRequestMessage, JsonRPCResponseMessage, JsonRPCNotification):
        converter.register_structure_hook(envelope, lambda obj, cls: cls(**obj))
    return converter


class StepFailed(Exception):
    """A session step got no (acceptable) answer."""

    def __init__(self, step: str, why: str):
        super().__init__(f"step '{step}' failed: {why}")


class Recorder:
    """Everything the server sent on its own initiative, reduced to stable facts."""

    def __init__(self, doc_uri: str):
        self.doc_uri = doc_uri
        self.configuration_asked = False
        self.progress_create_asked = False
        self.registered_methods: set[str] = set()
        self.log_message_seen = False
        # Latest list published for the document, and the event signalling
        # that an acceptable publish (see REQUIRE_NONEMPTY_DIAGNOSTICS) arrived.
        self.diagnostics: Optional[list] = None
        self.diagnostics_ready = asyncio.Event()
        self.require_nonempty = True

    def attach(self, client: LanguageClient) -> None:
        # Params arrive as plain JSON (see RawJsonProtocol); a handler's return
        # value becomes the `result` of pygls' response to a server request.
        @client.feature("workspace/configuration")
        def configuration(params: dict):
            self.configuration_asked = True
            # null per item: both servers then fall back to their defaults.
            return [None for _ in params["items"]]

        @client.feature("client/registerCapability")
        def register(params: dict):
            self.registered_methods.update(r["method"] for r in params["registrations"])
            return None

        @client.feature("window/workDoneProgress/create")
        def progress_create(params: dict):
            self.progress_create_asked = True
            return None

        @client.feature("window/logMessage")
        def log_message(params: dict):
            self.log_message_seen = True

        @client.feature("textDocument/publishDiagnostics")
        def diagnostics(params: dict):
            if same_file(params["uri"], self.doc_uri):
                self.diagnostics = params["diagnostics"]
                if params["diagnostics"] or not self.require_nonempty:
                    self.diagnostics_ready.set()


def same_file(uri_a: str, uri_b: str) -> bool:
    """Compare file URIs tolerantly (servers may re-encode them)."""
    return unquote(urlparse(uri_a).path) == unquote(urlparse(uri_b).path)


def basename(uri: str) -> str:
    return pathlib.PurePosixPath(unquote(urlparse(uri).path)).name


async def bounded(step: str, awaitable: Awaitable[Any], timeout: float) -> Any:
    """Await `awaitable` within `timeout`, turning every failure into StepFailed."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise StepFailed(step, f"no answer within {timeout:g}s") from None
    except Exception as exc:  # error responses, dead server, broken pipe...
        raise StepFailed(step, f"{type(exc).__name__}: {exc}") from None


def normalise_diagnostics(diags: list) -> list:
    """(line, severity, code, message) per diagnostic, in a canonical order."""
    rows = [[d["range"]["start"]["line"], d.get("severity"), str(d.get("code", "")),
             d["message"]] for d in diags]
    return sorted(rows, key=json.dumps)


def hover_text(hover: dict) -> str:
    """Flatten MarkupContent / MarkedString / MarkedString[] to text."""
    contents = hover["contents"]
    parts = contents if isinstance(contents, list) else [contents]
    return "\n".join(p if isinstance(p, str) else p["value"] for p in parts)


def definition_targets(result: Any) -> list:
    """[file name, line] per Location or LocationLink, sorted."""
    targets = result if isinstance(result, list) else [result]
    rows = []
    for t in targets:
        if "targetUri" in t:
            rows.append([basename(t["targetUri"]), t["targetSelectionRange"]["start"]["line"]])
        else:
            rows.append([basename(t["uri"]), t["range"]["start"]["line"]])
    return sorted(rows)


async def session(client: LanguageClient, rec: Recorder, workspace: pathlib.Path,
                  flavour: str, timeout: float) -> dict:
    """Steps 1-9 up to and including `exit`; returns the summary."""
    out: dict[str, Any] = {"server": flavour}
    root_uri = workspace.as_uri()
    (workspace / DOC_NAME).write_text(DOC_TEXT)
    doc = {"uri": rec.doc_uri}

    capabilities = {
        "workspace": {
            "configuration": True,
            "workspaceFolders": True,
            "didChangeConfiguration": {"dynamicRegistration": True},
            # Makes pyright send client/registerCapability (file watchers).
            "didChangeWatchedFiles": {"dynamicRegistration": True},
        },
        "textDocument": {
            "synchronization": {},
            "publishDiagnostics": {},
            "hover": {"contentFormat": ["markdown", "plaintext"]},
            "completion": {},
            "definition": {},
        },
        "window": {"workDoneProgress": True},
    }
    init = await bounded("initialize", client.initialize_async({
        "processId": None,
        "rootUri": root_uri,
        "workspaceFolders": [{"uri": root_uri, "name": workspace.name}],
        "capabilities": capabilities,
    }), timeout)
    out["capabilities"] = sorted(k for k, v in init["capabilities"].items() if v)
    out["server_name"] = (init.get("serverInfo") or {}).get("name")

    client.initialized({})
    client.text_document_did_open({"textDocument": {
        "uri": rec.doc_uri, "languageId": "python", "version": 1, "text": DOC_TEXT}})

    await bounded("publishDiagnostics", rec.diagnostics_ready.wait(), timeout)

    hover = await bounded("hover", client.text_document_hover_async(
        {"textDocument": doc, "position": CALL_SITE}), timeout)
    if hover is None:
        raise StepFailed("hover", "null result on the greet call site")
    out["hover_mentions_greet"] = "greet" in hover_text(hover)

    completion = await bounded("completion", client.text_document_completion_async(
        {"textDocument": doc, "position": COMPLETION_AT}), timeout)
    items = completion.get("items", []) if isinstance(completion, dict) else completion or []
    labels = sorted({i["label"] for i in items if i["label"].startswith("pa")})
    if not labels:
        raise StepFailed("completion", "no label starting with 'pa' after 'os.pa'")
    out["completion_pa"] = labels

    definition = await bounded("definition", client.text_document_definition_async(
        {"textDocument": doc, "position": CALL_SITE}), timeout)
    if not definition:
        raise StepFailed("definition", "null/empty result on the greet call site")
    out["definition"] = definition_targets(definition)

    await bounded("shutdown", client.shutdown_async(None), timeout)
    # What the server volunteered is recorded once shutdown has been answered.
    out["diagnostics"] = normalise_diagnostics(rec.diagnostics or [])
    out["configuration_asked"] = rec.configuration_asked
    out["registered_methods"] = sorted(rec.registered_methods)
    out["progress_create_asked"] = rec.progress_create_asked
    out["log_message_seen"] = rec.log_message_seen
    client.exit(None)
    return out


async def drain(stream: asyncio.StreamReader, keep: bytearray, limit: int = 8192) -> None:
    """Keep reading the server's stderr (so it never blocks) and keep its tail."""
    while chunk := await stream.read(4096):
        keep.extend(chunk)
        del keep[:-limit]


async def close(client: LanguageClient) -> None:
    """Close our end of the connection and reap pygls' reader tasks, bounded."""
    writer = client.protocol.writer
    if writer is not None:
        writer.close()
    try:
        await asyncio.wait_for(client.stop(), CLOSE_GRACE_S)
    except asyncio.TimeoutError:
        for task in client._async_tasks:  # pygls keeps no public handle on them
            task.cancel()


async def main_async(args: argparse.Namespace, cmd: list) -> int:
    with tempfile.TemporaryDirectory(prefix="lsp-drive-") as tmp:
        workspace = pathlib.Path(args.workspace or tmp).resolve()
        rec = Recorder((workspace / DOC_NAME).as_uri())
        rec.require_nonempty = REQUIRE_NONEMPTY_DIAGNOSTICS[args.server]
        client = LanguageClient("lsp-drive", "1", protocol_cls=RawJsonProtocol,
                                converter_factory=raw_json_converter)
        rec.attach(client)

        stderr_tail = bytearray()
        drainer: Optional[asyncio.Task] = None
        proc: Optional[asyncio.subprocess.Process] = None
        failure: Optional[StepFailed] = None
        out: dict[str, Any] = {}
        try:
            if cmd:
                await bounded("start server", client.start_io(*cmd), args.timeout)
                proc = client._server  # pygls keeps its asyncio Process here
                drainer = asyncio.create_task(drain(proc.stderr, stderr_tail))
            else:
                host, _, port = args.tcp.rpartition(":")
                await bounded("connect", client.start_tcp(host, int(port)), args.timeout)
            out = await session(client, rec, workspace, args.server, args.timeout)
        except StepFailed as exc:
            failure = exc

        if proc is not None:
            # The server must honour `exit` by itself: stdin is still open here.
            try:
                await asyncio.wait_for(proc.wait(), 0.1 if failure else EXIT_GRACE_S)
                out["server_exit"] = proc.returncode
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                out["server_exit"] = None
        await close(client)
        if drainer is not None:
            # EOF comes with the process' exit, unless a grandchild keeps stderr.
            await asyncio.wait([drainer], timeout=CLOSE_GRACE_S)
            drainer.cancel()

        if failure is not None:
            print(f"drive.py ({args.server}): {failure}", file=sys.stderr)
            if stderr_tail:
                print("--- server stderr (tail) ---", file=sys.stderr)
                print(stderr_tail.decode(errors="replace"), file=sys.stderr)
            return 1
        print(json.dumps(out, sort_keys=True, separators=(",", ":")))
        return 0


def parse_args(argv: list) -> tuple:
    """Split `argv` at `--`: options before it, the server command after it."""
    cmd = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, choices=sorted(REQUIRE_NONEMPTY_DIAGNOSTICS))
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--io", action="store_true", help="run the command after -- on stdio")
    mode.add_argument("--tcp", metavar="HOST:PORT", help="connect to a listening server")
    p.add_argument("--workspace", help="workspace dir (default: a fresh temp dir)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per step")
    args = p.parse_args(argv)
    if args.io and not cmd:
        p.error("--io needs the server command after --")
    if args.tcp and cmd:
        p.error("--tcp takes no command after --")
    return args, cmd


def main() -> int:
    # pygls warns about every notification we do not handle ($/progress, ...).
    logging.basicConfig(level=logging.ERROR)
    args, cmd = parse_args(sys.argv[1:])
    return asyncio.run(main_async(args, cmd))


if __name__ == "__main__":
    sys.exit(main())
