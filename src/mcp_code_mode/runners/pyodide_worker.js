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
//
// JavaScript is out of reach of the script (`seal`): Pyodide gets an empty frozen object as its `js`
// module, `js` and `pyodide_js` are unregistered, and before the script runs the realm loses every
// capability a JavaScript object could lead to: code from strings (`eval`, the `Function` constructors),
// `Deno`, `process`, `Worker` and storage are gone, the intrinsics are frozen (so the code below cannot
// be redirected by a polluted prototype), and `node:fs` refuses stdin, stdout and stderr. What Python
// keeps is one narrow function (`bridge`): strings in, a string out, each checked here; every line this
// program writes is built here and serialized here.

import nodeFs from "node:fs";

const MAX_CHUNK = 8192;
const FLUSH_MS = 50;

const encoder = new TextEncoder();
const stdoutWrite = Deno.stdout.writeSync.bind(Deno.stdout);
const exit = Deno.exit.bind(Deno);
const revokePermission = Deno.permissions.revokeSync.bind(Deno.permissions);
const jsonStringify = JSON.stringify;
const jsonParse = JSON.parse;
const isArray = Array.isArray;
const MAX_NAME = 256;

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
    `{"op":"call","id":${id},"server":${jsonStringify(server)},` +
      `"tool":${jsonStringify(tool)},"arguments":${jsonStringify(argumentsJson)}}`,
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

// ----- the bridge: the one JavaScript function Python holds ---------------------------------------
//
// The script can reach it (it is in the prelude's globals), so it trusts nothing: it takes only strings,
// checks them, never throws (a JavaScript error would hand Python a JavaScript object) and returns a
// string, `undefined`, or, before the run only, a Promise of the next host message. It has no prototype,
// so its JsProxy leads nowhere.

const bridgeState = { running: false, runLine: null, nextMessage: null, echo: (text) => Promise.resolve(text) };

function refusal(message) {
  return jsonStringify({ op: "result", error: { type: "NotCapable", message } });
}

function bridgeCall(op, a, b, c) {
  if (op === "output") {
    if (typeof a === "string") output.write(a);
    return undefined;
  }
  if (op === "flush") {
    output.flush();
    return undefined;
  }
  if (op === "call") {
    if (typeof a !== "string" || typeof b !== "string" || typeof c !== "string") {
      return refusal("a tool call takes a server, a tool and JSON arguments, as strings");
    }
    if (a.length > MAX_NAME || b.length > MAX_NAME) return refusal("server or tool name too long");
    let args;
    try {
      args = jsonParse(c);
    } catch {
      return refusal("the arguments of a tool call must be JSON");
    }
    if (args === null || typeof args !== "object" || isArray(args)) {
      return refusal("the arguments of a tool call must be a JSON object");
    }
    return requestSync(a, b, args);
  }
  if (bridgeState.running) return undefined; // the waits below are the worker's, before the run
  if (op === "next" && bridgeState.nextMessage) return bridgeState.nextMessage();
  if (op === "echo" && typeof a === "string") return bridgeState.echo(a);
  return undefined;
}

const bridge = Object.setPrototypeOf((op, a, b, c) => {
  try {
    return bridgeCall(op, a, b, c);
  } catch {
    return undefined;
  }
}, null);

// ----- sealing the realm before the script runs ---------------------------------------------------

function notCapable() {
  throw new Error("NotCapable: JavaScript is out of reach in the pyodide runner");
}

const fdGuarded = [
  "writeSync", "write", "writev", "writevSync", "readSync", "read", "readv", "readvSync", "closeSync", "close",
  "fsyncSync", "fsync", "fdatasyncSync", "fdatasync", "ftruncateSync", "ftruncate", "fchmodSync", "fchownSync",
  "futimesSync", "fstatSync",
];

const DENO_FILE_SYSTEM =
  /^(errors|build|version|cwd|umask|FsFile|SeekMode|(open|create|read|stat|lstat|realPath|mkdir|makeTemp|remove|rename|copyFile|link|symlink|truncate|chmod|chown|utime)[A-Za-z]*|writeFile(Sync)?|writeTextFile(Sync)?)$/;

function seal() {
  // No code from strings: eval, and the four Function constructors wherever a function leads to them.
  const constructors = [
    Function,
    Object.getPrototypeOf(async function () {}).constructor,
    Object.getPrototypeOf(function* () {}).constructor,
    Object.getPrototypeOf(async function* () {}).constructor,
  ];
  for (const constructor of constructors) {
    Object.defineProperty(constructor.prototype, "constructor", { value: notCapable, writable: false });
  }
  // Capabilities of the realm: Deno's namespace, Node's process, workers, storage that outlives the run.
  // Pyodide still names `Function` (for `Function.prototype.apply`, `instanceof Function`): a stand-in.
  const standIn = function Function() {
    notCapable();
  };
  Object.defineProperty(standIn, "prototype", { value: Function.prototype, writable: false });
  globalThis.Function = standIn;
  globalThis.eval = notCapable;
  // `Deno` is replaced by its file-system part: Deno's `node:fs`, which Pyodide's NODEFS uses, calls
  // `Deno.lstatSync` and friends through the global. Those stay bound by the permissions; stdin,
  // stdout, stderr, exit, permissions, env, subprocesses and sockets are not there.
  const realDeno = globalThis.Deno;
  const files = Object.create(null);
  for (const name of Object.keys(realDeno)) {
    if (DENO_FILE_SYSTEM.test(name)) files[name] = realDeno[name];
  }
  Object.defineProperty(globalThis, "Deno", { value: Object.freeze(files), writable: false, configurable: false });
  for (const name of [
    "process", "Worker", "require", "global", "localStorage", "sessionStorage",
    "caches", "BroadcastChannel", "SharedWorker", "Bun",
  ]) {
    try {
      delete globalThis[name];
    } catch {
      // not there
    }
    if (name in globalThis) Object.defineProperty(globalThis, name, { value: undefined, writable: false });
  }
  // node:fs, which Pyodide's NODEFS and its default stdout use: never the bridge's file descriptors.
  for (const name of fdGuarded) {
    const original = nodeFs[name];
    if (typeof original !== "function") continue;
    nodeFs[name] = function (fd, ...rest) {
      if (typeof fd !== "number" || fd <= 2) throw new Error("NotCapable: not a file of the workspace");
      return original.call(this, fd, ...rest);
    };
  }
  Object.freeze(nodeFs);
  // The intrinsics the code above uses after the script starts, frozen: a prototype the script
  // pollutes (`Object.prototype.toJSON`, `Array.prototype.join`) cannot change what is written.
  const arrayIterator = Object.getPrototypeOf([][Symbol.iterator]());
  for (const object of [
    Object, Object.prototype, Array, Array.prototype, Function.prototype, String, String.prototype,
    Number, Number.prototype, Boolean.prototype, Symbol, Symbol.prototype, JSON, Math, Reflect, Promise,
    Promise.prototype, RegExp, RegExp.prototype, Map.prototype, Set.prototype, WeakMap.prototype,
    arrayIterator, Object.getPrototypeOf(arrayIterator), Object.getPrototypeOf(""[Symbol.iterator]()),
    TextEncoder.prototype, TextDecoder.prototype, Uint8Array, Uint8Array.prototype,
    Object.getPrototypeOf(Uint8Array), Object.getPrototypeOf(Uint8Array.prototype), performance,
    Object.getPrototypeOf(performance), ...constructors.map((c) => c.prototype), notCapable, standIn, bridge,
  ]) {
    Object.freeze(object);
  }
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
    jsglobals: Object.freeze(Object.create(null)), // what `js` would be: nothing
    env: { HOME: "/workspace" },
    stdin: () => null,
    stdout: (text) => output.write(text + "\n"),
    stderr: (text) => output.write(text + "\n"),
  });
  pyodide.mountNodeFS("/workspace", Deno.cwd());
  pyodide.mountNodeFS("/wheels", wheelsDir);
  const micropip = [...Deno.readDirSync(wheelsDir)].map((e) => e.name).filter((n) => /^micropip-.*\.whl$/.test(n));
  pyodide.unregisterJsModule("js");
  pyodide.unregisterJsModule("pyodide_js");
  const codemode = pyodide.pyimport("_codemode");
  if (micropip.length > 0) codemode.install_wheels(pyodide.toPy([`/wheels/${micropip.sort().pop()}`]));

  // Python's main loop (`_codemode.serve`) is entered once, now, and waits for its run suspended in
  // `run_sync(next_message())`: a run resumes a stack that is already there.
  const inbox = [];
  let handOver = null;
  let waiting;
  const firstWait = new Promise((resolve) => (waiting = resolve));
  bridgeState.nextMessage = () =>
    new Promise((resolve) => {
      if (inbox.length > 0) {
        const line = inbox.shift();
        if (line === bridgeState.runLine) bridgeState.running = true; // Python has its run: no more waits
        resolve(line);
      } else {
        handOver = resolve;
        waiting();
      }
    });
  const deliver = (line) => {
    if (handOver) {
      const resolve = handOver;
      handOver = null;
      if (line === bridgeState.runLine) bridgeState.running = true;
      resolve(line);
    } else {
      inbox.push(line);
    }
  };
  output.cap = 0; // the warm-up's output is dropped
  const serving = codemode.serve.callPromising(bridge);
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
    seal();
    bridgeState.runLine = line;
    deliver(line);
    done = doneFields(await serving);
  } catch (error) {
    done = { success: false, error: { type: "RunnerError", message: String(error?.message ?? error) } };
  }
  output.flush({ ...done, op: "done", dropped: output.dropped });
}

// What Python returned for the run: the script may have rewritten the prelude, so it is checked here (a
// JSON object, whose fields cannot set `op` or `dropped`: those are written after them).
function doneFields(result) {
  if (typeof result !== "string") throw new Error("the run did not return its result");
  const done = jsonParse(result);
  if (done === null || typeof done !== "object" || isArray(done)) throw new Error("the run's result is not an object");
  return done;
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
