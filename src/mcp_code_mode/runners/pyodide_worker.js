// The worker program of the `pyodide` runner: CPython (Pyodide, WebAssembly) under Deno.
//
//   deno run <permissions> pyodide_worker.js serve    PYODIDE_DIR SNAPSHOT WHEELS_DIR [PACKAGE_INDEX]
//   deno run <permissions> pyodide_worker.js snapshot PYODIDE_DIR OUT PRELUDE
//
// `snapshot` boots Pyodide once (seconds), imports the prelude (`pyodide_prelude.py`, as `_codemode`)
// and the common standard-library modules, and writes a memory snapshot to OUT. (A memory snapshot
// holds the interpreter's memory, not its file system: files are added after a restore.)
//
// `serve` restores an interpreter from the snapshot, mounts the current directory (the run's
// workspace) at /workspace and the wheel cache at /wheels, unpacks micropip from its wheel, says
// `ready`, and serves exactly one run over the bridge protocol of
// `mcp_code_mode.bridge` (JSON lines on stdin/stdout), then exits: every run gets a fresh
// interpreter, and nothing carries over. The host keeps a few of these waiting.
//
// Deno's permissions are the sandbox: the host grants read of the Pyodide files, the snapshot and
// this script, read/write of the workspace, and network only when runs may use it; never env, run,
// ffi or sys. Before the script runs, this program revokes network (unless the run allows it) and
// read of everything but the workspace and the package wheels.

const MAX_CHUNK = 8192;
const FLUSH_MS = 50;

const encoder = new TextEncoder();
const stdoutWrite = Deno.stdout.writeSync.bind(Deno.stdout);
const exit = Deno.exit.bind(Deno);
const revokePermission = Deno.permissions.revokeSync.bind(Deno.permissions);
const jsonStringify = JSON.stringify;

// Nothing but bridge messages may reach stdout: console output goes to stderr.
for (const name of ["log", "info", "debug", "dir", "table", "trace"]) {
  console[name] = console.error;
}

function send(...messages) {
  writeLine(messages.map((m) => jsonStringify(m)).join("\n"));
}

function writeLine(line) {
  let data = encoder.encode(line + "\n");
  while (data.length > 0) {
    const written = stdoutWrite(data);
    data = data.subarray(written);
  }
}

// ----- printed output: capped, sent in chunks ------------------------------------------------

const output = {
  cap: 100000,
  used: 0,
  dropped: 0,
  pending: [],
  pendingChars: 0,
  lastFlush: performance.now(),

  write(text) {
    text = String(text);
    const room = this.cap - this.used;
    if (room <= 0) {
      this.dropped += text.length;
      return;
    }
    if (text.length > room) {
      this.dropped += text.length - room;
      text = text.slice(0, room);
    }
    this.used += text.length;
    this.pending.push(text);
    this.pendingChars += text.length;
    if (this.pendingChars >= MAX_CHUNK || performance.now() - this.lastFlush >= FLUSH_MS) {
      this.flush();
    }
  },

  /** Send what is pending, then `then` (the run's done) in the same write: the host reads them at once. */
  flush(...then) {
    const messages = this.pending.length > 0 ? [{ op: "output", data: this.pending.join("") }] : [];
    this.pending = [];
    this.pendingChars = 0;
    if (messages.length + then.length > 0) send(...messages, ...then);
    this.lastFlush = performance.now();
  },
};

// ----- the host's messages, and its answers to tool calls ---------------------------------------
//
// Until the run message, stdin is read asynchronously (the worker waits, warm, in the event loop).
// From the run on, it is read only synchronously: a stub call writes its request and blocks in
// `readSync` until its answer is there, with no promise, no suspended WebAssembly stack and no
// thread-pool read in between (about 0.3 ms a call instead of 1.2).

const stdinReader = Deno.stdin.read.bind(Deno.stdin);
const stdinReadSync = Deno.stdin.readSync.bind(Deno.stdin);

const stdin = {
  decoder: new TextDecoder(),
  buffer: "",
  chunk: new Uint8Array(1 << 16),

  take() {
    let index;
    while ((index = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, index);
      this.buffer = this.buffer.slice(index + 1);
      if (line.trim()) return line;
    }
    return null;
  },

  add(count) {
    this.buffer += this.decoder.decode(this.chunk.subarray(0, count), { stream: true });
  },

  async next() {
    for (;;) {
      const line = this.take();
      if (line !== null) return line;
      const count = await stdinReader(this.chunk);
      if (count === null) return null;
      this.add(count);
    }
  },

  nextSync() {
    for (;;) {
      const line = this.take();
      if (line !== null) return line;
      const count = stdinReadSync(this.chunk);
      if (count === null) exit(0); // the host is gone
      this.add(count);
    }
  },
};

let nextId = 0;

// Send a tool call and block until the host answers it: its `result` line, which Python parses. (The
// host answers the calls of a run one at a time, in order, so an awaited call is answered the same
// way.) The host writes the answer compactly, `op` and `id` first (`bridge.encode`): a line that starts
// that way is taken as it is, so a large result is parsed once, by Python, not twice.
function requestSync(server, tool, argumentsJson) {
  output.flush();
  nextId += 1;
  const id = nextId;
  const answer = `{"op":"result","id":${id},`;
  writeLine(
    `{"op":"call","id":${id},"server":${jsonStringify(String(server))},` +
      `"tool":${jsonStringify(String(tool))},"arguments":${argumentsJson}}`,
  );
  for (;;) {
    const line = stdin.nextSync();
    if (line.startsWith(answer)) return line;
    try {
      const message = JSON.parse(line);
      if (message.op === "result" && message.id === id) return line;
    } catch {
      // not a message: skip it
    }
  }
}

function request(server, tool, argumentsJson) {
  return Promise.resolve(requestSync(server, tool, argumentsJson));
}

// ----- loading Pyodide ---------------------------------------------------------------------

async function importPyodide(dir) {
  const url = new URL("file://");
  url.pathname = `${dir.replace(/\/$/, "")}/pyodide.mjs`;
  return await import(url.href);
}

async function makeSnapshot(dir, out, preludePath) {
  const { loadPyodide } = await importPyodide(dir);
  const pyodide = await loadPyodide({
    indexURL: `${dir}/`,
    _makeSnapshot: true,
    env: { HOME: "/home/pyodide" },
    stdout: (text) => console.error(text),
    stderr: (text) => console.error(text),
  });
  const prelude = Deno.readTextFileSync(preludePath);
  const site = pyodide.runPython("import site; site.getsitepackages()[0]");
  pyodide.FS.writeFile(`${site}/_codemode.py`, prelude);
  pyodide.runPython(`
import importlib
import _codemode
for name in ("asyncio", "ast", "dis", "json", "re", "math", "datetime", "collections", "csv", "traceback",
             "pyodide.code", "pyodide.ffi", "zipfile", "site"):
    importlib.import_module(name)
`);
  Deno.writeFileSync(out, pyodide.makeMemorySnapshot());
}

async function serve(dir, snapshotPath, wheelsDir, packageIndex) {
  const { loadPyodide } = await importPyodide(dir);
  const snapshot = Deno.readFileSync(snapshotPath);
  const index = packageIndex ? packageIndex.replace(/\/?$/, "/") : undefined;
  const remote = index !== undefined && /^https?:/.test(index);
  const pyodide = await loadPyodide({
    indexURL: `${dir}/`,
    packageBaseUrl: index,
    packageCacheDir: index && !remote ? index : undefined,
    _loadSnapshot: snapshot,
    env: { HOME: "/workspace" },
    stdin: () => null,
    stdout: (text) => output.write(text + "\n"),
    stderr: (text) => output.write(text + "\n"),
  });
  pyodide.mountNodeFS("/workspace", Deno.cwd());
  pyodide.mountNodeFS("/wheels", wheelsDir);
  const micropip = [...Deno.readDirSync(wheelsDir)].map((e) => e.name).filter((n) => /^micropip-.*\.whl$/.test(n));
  const hostModule = {
    output: (text) => output.write(text),
    flush: () => output.flush(),
    request,
    request_sync: requestSync,
    echo: (text) => Promise.resolve(text),
    next_message: null,
  };
  pyodide.registerJsModule("_codemode_host", hostModule);
  const codemode = pyodide.pyimport("_codemode");
  if (micropip.length > 0) codemode.install_wheels(pyodide.toPy([`/wheels/${micropip.sort().pop()}`]));

  // Python's main loop (`_codemode.serve`) is entered once, now, and waits for its run suspended in
  // `run_sync(next_message())`: a run resumes a stack that is already there.
  const inbox = [];
  let handOver = null;
  let waiting;
  const firstWait = new Promise((resolve) => (waiting = resolve));
  hostModule.next_message = () =>
    new Promise((resolve) => {
      if (inbox.length > 0) {
        resolve(inbox.shift());
      } else {
        handOver = resolve;
        waiting();
      }
    });
  const deliver = (line) => {
    if (handOver) {
      const resolve = handOver;
      handOver = null;
      resolve(line);
    } else {
      inbox.push(line);
    }
  };
  output.cap = 0; // the warm-up's output is dropped
  const serving = codemode.serve.callPromising();
  await Promise.race([firstWait, serving]);
  output.pending = [];
  output.pendingChars = 0;
  output.used = 0;
  output.dropped = 0;
  send({ op: "ready" });

  for (;;) {
    const line = await stdin.next();
    if (line === null) exit(0); // the host closed stdin: it is gone
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      continue;
    }
    if (message.op === "run") {
      // From here on stdin is read synchronously, by the tool calls (see `requestSync`).
      await runOnce(pyodide, message, line, deliver, serving, { dir, snapshotPath });
      exit(0);
    } else if (typeof message.stubs === "string") {
      deliver(line); // `prepare`: Python compiles the stubs while it waits
    }
  }
}

async function runOnce(pyodide, message, line, deliver, serving, paths) {
  output.cap = Math.max(0, Number(message.max_output ?? 100000));
  output.lastFlush = performance.now();
  let done;
  try {
    const builds = Array.isArray(message.pyodide_packages) ? message.pyodide_packages : [];
    if (builds.length > 0) {
      const errors = [];
      await pyodide.loadPackage(builds, { messageCallback: () => {}, errorCallback: (text) => errors.push(text) });
      if (errors.length > 0) throw new Error(`cannot load ${builds.join(", ")}: ${errors.join("; ")}`);
    }
    lockDown(message.allow_network === true, [paths.dir, paths.snapshotPath, new URL(import.meta.url).pathname]);
    deliver(line);
    done = JSON.parse(await serving);
  } catch (error) {
    done = { success: false, error: { type: "RunnerError", message: String(error?.message ?? error) } };
  }
  output.flush({ op: "done", ...done, dropped: output.dropped });
}

function lockDown(allowNetwork, readable) {
  if (!allowNetwork) revokePermission({ name: "net" });
  for (const path of readable) {
    revokePermission({ name: "read", path });
  }
}

const [mode, dir, path, ...rest] = Deno.args;
if (mode === "snapshot") {
  await makeSnapshot(dir, path, rest[0]);
} else if (mode === "serve") {
  await serve(dir, path, rest[0], rest[1]);
} else {
  console.error(`usage: pyodide_worker.js serve|snapshot PYODIDE_DIR PATH ...`);
  exit(2);
}
