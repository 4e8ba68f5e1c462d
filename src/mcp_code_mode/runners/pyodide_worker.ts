// The worker program of the `pyodide` runner: CPython (Pyodide, WebAssembly) under Deno.
//
//   deno run <permissions> pyodide_worker.ts serve    PYODIDE_DIR SNAPSHOT WHEELS_DIR [PACKAGE_INDEX]
//   deno run <permissions> pyodide_worker.ts snapshot PYODIDE_DIR OUT PRELUDE
//
// `snapshot` boots Pyodide once (seconds), imports the prelude (`pyodide_prelude.py`, as `_codemode`,
// beside `sandboxed/cm_runtime.py` as `cm_runtime` when that file is there) and the common
// standard-library modules, and writes a memory snapshot to OUT. (A memory snapshot holds the
// interpreter's memory, not its file system: files are added after a restore.)
//
// `serve` restores an interpreter from the snapshot, mounts the current directory (the run's
// workspace) at /workspace and the wheel cache at /wheels, puts micropip's wheel on `sys.path`, says
// `ready`, and serves exactly one run over the bridge protocol of
// `mcp_code_mode.bridge` (JSON lines on stdin/stdout), then exits: every run gets a fresh
// interpreter, and nothing carries over. The host keeps a few of these waiting. The line reader and
// writer, the output buffer, the tool channel and the checks of the run message and of the return
// value are shared with the deno runner's worker (worker_runtime.ts).
//
// Deno's permissions are the sandbox: the host grants read of the Pyodide files, the snapshot and
// this program, read/write of the workspace, and network only when runs may use it; never env, run,
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
import {
  badNames,
  capJson,
  isJsonObject,
  type Json,
  LineReader,
  type Message,
  MessageWriter,
  Output,
  parseMessage,
  parseRunMessage,
  progressReport,
  type RunMessage,
  RUNTIME_URL,
  sendFiles,
  ToolChannel,
  type WorkspaceFiles,
} from "./worker_runtime.ts";

const realStdout = Deno.stdout;
const realStdin = Deno.stdin;
const exit: (code?: number) => never = Deno.exit.bind(Deno);
const revokePermission = Deno.permissions.revokeSync.bind(Deno.permissions);
const realLstat = Deno.lstatSync;
const realOpen = Deno.openSync;
// The workspace as this worker reads it (the script's /workspace is mounted on it): for the run's files.
const workspace: WorkspaceFiles = {
  lstat: (path) => realLstat(path),
  open: (path) => realOpen(path, { read: true }),
};
let caps: RunMessage["artifacts"] = null;
const jsonStringify = JSON.stringify;
const jsonParse = JSON.parse;
const isArray = Array.isArray;

// Nothing but bridge messages may reach stdout: console output goes to stderr.
for (const name of ["log", "info", "debug", "dir", "table", "trace"] as const) {
  console[name] = console.error;
}

const writer = new MessageWriter((p) => realStdout.writeSync(p));
// Until the run message, stdin is read asynchronously (the worker waits, warm, in the event loop).
// From the run on, it is read only synchronously: a stub call writes its request and blocks in
// `readSync` until its answer is there, with no promise, no suspended WebAssembly stack and no
// thread-pool read in between (about 0.3 ms a call instead of 1.2).
const reader = new LineReader((p) => realStdin.read(p), (p) => realStdin.readSync(p), () => exit(0));
// No timer: Python runs on this thread, so a timer could not fire while it computes; a write sends
// what is pending once the last send is `FLUSH_MS` old, and the prelude asks for a flush before it waits.
const output = new Output(writer);
const tools = new ToolChannel(writer, reader, output);

// ----- the bridge: the one JavaScript function Python holds ---------------------------------------
//
// The script can reach it (it is in the prelude's globals), so it trusts nothing: it takes only strings,
// checks them, never throws (a JavaScript error would hand Python a JavaScript object) and returns a
// string, `undefined`, or, before the run only, a Promise of the next host message. It has no prototype,
// so its JsProxy leads nowhere.

type Bridge = (op: unknown, a?: unknown, b?: unknown, c?: unknown, d?: unknown, e?: unknown) => unknown;

const bridgeState: {
  running: boolean;
  runLine: string | null;
  nextMessage: (() => Promise<string>) | null;
  echo: (text: string) => Promise<string>;
} = { running: false, runLine: null, nextMessage: null, echo: (text) => Promise.resolve(text) };

function refusal(message: string): string {
  return jsonStringify({ op: "result", error: { type: "NotCapable", message } });
}

function bridgeCall(op: unknown, a: unknown, b: unknown, c: unknown, d?: unknown, e?: unknown): unknown {
  if (op === "output") {
    if (typeof a === "string") output.write(a);
    return undefined;
  }
  if (op === "flush") {
    output.flush();
    return undefined;
  }
  if (op === "progress") {
    // The prelude's report_progress sets the pace (cm_runtime.ProgressReports); the figures are checked here.
    const figures = typeof a === "string" ? parseMessage(a) : null;
    const report = figures ? progressReport(figures.done, figures.total, figures.message) : "not a report";
    if (typeof report !== "string") output.flush(report);
    return undefined;
  }
  if (op === "image") {
    // show(): the prelude checked the image; the host checks it again. Only its size is bounded here.
    const limit = Math.ceil(((caps?.max_image ?? 0) * 4) / 3) + 4;
    if (typeof a === "string" && typeof b === "string" && a.length <= limit && b.length <= 100) {
      output.flush({ op: "image", data: a, mimeType: b });
    }
    return undefined;
  }
  if (op === "receive") {
    // The next answer to a call `send` made (any id: the prelude gives each to its caller), or undefined
    // when none is unanswered.
    return tools.receiveSync() ?? undefined;
  }
  if (op === "call" || op === "send") {
    if (typeof a !== "string" || typeof b !== "string" || typeof c !== "string") {
      return refusal("a tool call takes a server, a tool and JSON arguments, as strings");
    }
    const badName = badNames(a, b);
    if (badName) return refusal(badName);
    let args: unknown;
    try {
      args = jsonParse(c);
    } catch {
      return refusal("the arguments of a tool call must be JSON");
    }
    if (!isJsonObject(args)) return refusal("the arguments of a tool call must be a JSON object");
    const line = typeof d === "number" && Number.isInteger(d) && d > 0 ? d : undefined; // the script's line
    if (op === "send") return String(tools.send(a, b, args, line, e === true)); // its id; answered by "receive"
    return tools.requestSync(a, b, args, line);
  }
  if (bridgeState.running) return undefined; // the waits below are the worker's, before the run
  if (op === "next" && bridgeState.nextMessage) return bridgeState.nextMessage();
  if (op === "echo" && typeof a === "string") return bridgeState.echo(a);
  return undefined;
}

const bridge: Bridge = Object.setPrototypeOf((op: unknown, a: unknown, b: unknown, c: unknown, d: unknown, e: unknown) => {
  try {
    return bridgeCall(op, a, b, c, d, e);
  } catch {
    return undefined;
  }
}, null);

// ----- sealing the realm before the script runs ---------------------------------------------------

function notCapable(): never {
  throw new Error("NotCapable: JavaScript is out of reach in the pyodide runner");
}

const fdGuarded = [
  "writeSync", "write", "writev", "writevSync", "readSync", "read", "readv", "readvSync", "closeSync", "close",
  "fsyncSync", "fsync", "fdatasyncSync", "fdatasync", "ftruncateSync", "ftruncate", "fchmodSync", "fchownSync",
  "futimesSync", "fstatSync",
];

const DENO_FILE_SYSTEM =
  /^(errors|build|version|cwd|umask|FsFile|SeekMode|(open|create|read|stat|lstat|realPath|mkdir|makeTemp|remove|rename|copyFile|link|symlink|truncate|chmod|chown|utime)[A-Za-z]*|writeFile(Sync)?|writeTextFile(Sync)?)$/;

type AnyFunction = (...args: unknown[]) => unknown;

function seal(): void {
  const global = globalThis as unknown as Record<string, unknown>;
  // No code from strings: eval, and the four Function constructors wherever a function leads to them.
  const constructors: { prototype: object }[] = [
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
  global.Function = standIn;
  global.eval = notCapable;
  // `Deno` is replaced by its file-system part: Deno's `node:fs`, which Pyodide's NODEFS uses, calls
  // `Deno.lstatSync` and friends through the global. Those stay bound by the permissions; stdin,
  // stdout, stderr, exit, permissions, env, subprocesses and sockets are not there.
  const realDeno = Deno as unknown as Record<string, unknown>;
  const files: Record<string, unknown> = Object.create(null);
  for (const name of Object.keys(realDeno)) {
    if (DENO_FILE_SYSTEM.test(name)) files[name] = realDeno[name];
  }
  Object.defineProperty(globalThis, "Deno", { value: Object.freeze(files), writable: false, configurable: false });
  for (const name of [
    "process", "Worker", "require", "global", "localStorage", "sessionStorage",
    "caches", "BroadcastChannel", "SharedWorker", "Bun",
  ]) {
    try {
      delete global[name];
    } catch {
      // not there
    }
    if (name in globalThis) Object.defineProperty(globalThis, name, { value: undefined, writable: false });
  }
  // node:fs, which Pyodide's NODEFS and its default stdout use: never the bridge's file descriptors.
  const fs = nodeFs as unknown as Record<string, unknown>;
  for (const name of fdGuarded) {
    const original = fs[name];
    if (typeof original !== "function") continue;
    fs[name] = function (this: unknown, fd: unknown, ...rest: unknown[]) {
      if (typeof fd !== "number" || fd <= 2) throw new Error("NotCapable: not a file of the workspace");
      return (original as AnyFunction).call(this, fd, ...rest);
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
//
// Pyodide is imported from the folder the host names, so only what this program uses is typed here.

interface PyProxy {
  [key: string]: unknown;
  callPromising(...args: unknown[]): Promise<unknown>;
}

interface Pyodide {
  FS: { writeFile(path: string, data: string): void };
  runPython(code: string): unknown;
  makeMemorySnapshot(): Uint8Array;
  mountNodeFS(emscriptenPath: string, hostPath: string): void;
  unregisterJsModule(name: string): void;
  pyimport(name: string): PyProxy;
  toPy(value: unknown): unknown;
  loadPackage(
    names: string[],
    options: { messageCallback: (text: string) => void; errorCallback: (text: string) => void },
  ): Promise<unknown>;
}

type LoadPyodide = (options: Record<string, unknown>) => Promise<Pyodide>;

async function importPyodide(dir: string): Promise<{ loadPyodide: LoadPyodide }> {
  const url = new URL("file://");
  url.pathname = `${dir.replace(/\/$/, "")}/pyodide.mjs`;
  return await import(url.href);
}

/** `sandboxed/cm_runtime.py` beside the prelude: the sandbox side shared with the zygote's runners. */
function runtimeBeside(preludePath: string): string | null {
  const path = `${preludePath.replace(/[^/]*$/, "")}sandboxed/cm_runtime.py`;
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return null;
  }
}

async function makeSnapshot(dir: string, out: string, preludePath: string): Promise<void> {
  const { loadPyodide } = await importPyodide(dir);
  const pyodide = await loadPyodide({
    indexURL: `${dir}/`,
    _makeSnapshot: true,
    env: { HOME: "/home/pyodide" },
    stdout: (text: string) => console.error(text),
    stderr: (text: string) => console.error(text),
  });
  const prelude = Deno.readTextFileSync(preludePath);
  const runtime = runtimeBeside(preludePath);
  const site = pyodide.runPython("import site; site.getsitepackages()[0]");
  if (runtime !== null) pyodide.FS.writeFile(`${site}/cm_runtime.py`, runtime);
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

async function serve(dir: string, snapshotPath: string, wheelsDir: string, packageIndex: string | undefined) {
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
    stdout: (text: string) => output.write(text + "\n"),
    stderr: (text: string) => output.write(text + "\n"),
  });
  pyodide.mountNodeFS("/workspace", Deno.cwd());
  pyodide.mountNodeFS("/wheels", wheelsDir);
  const micropip = [...Deno.readDirSync(wheelsDir)].map((e) => e.name).filter((n) => /^micropip-.*\.whl$/.test(n));
  pyodide.unregisterJsModule("js");
  pyodide.unregisterJsModule("pyodide_js");
  const codemode = pyodide.pyimport("_codemode");
  if (micropip.length > 0) {
    // Imported from its wheel where it lies (zipimport): nothing is unpacked into each interpreter.
    (codemode.add_wheel as AnyFunction)(`/wheels/${micropip.sort().pop()}`);
  }

  // Python's main loop (`_codemode.serve`) is entered once, now, and waits for its run suspended in
  // `run_sync(next_message())`: a run resumes a stack that is already there.
  const inbox: string[] = [];
  let handOver: ((line: string) => void) | null = null;
  let waiting: () => void = () => {};
  const firstWait = new Promise<void>((resolve) => (waiting = resolve));
  bridgeState.nextMessage = () =>
    new Promise<string>((resolve) => {
      if (inbox.length > 0) {
        const line = inbox.shift()!;
        if (line === bridgeState.runLine) bridgeState.running = true; // Python has its run: no more waits
        resolve(line);
      } else {
        handOver = resolve;
        waiting();
      }
    });
  const deliver = (line: string): void => {
    if (handOver) {
      const resolve = handOver;
      handOver = null;
      if (line === bridgeState.runLine) bridgeState.running = true;
      resolve(line);
    } else {
      inbox.push(line);
    }
  };
  output.reset(0); // the warm-up's output is dropped
  const serving = (codemode.serve as PyProxy).callPromising(bridge);
  await Promise.race([firstWait, serving]);
  output.reset(0);
  writer.send({ op: "ready" });

  for (;;) {
    const line = await reader.next();
    const message = parseMessage(line);
    if (message === null) continue;
    if (message.op === "run") {
      // From here on stdin is read synchronously, by the tool calls (see `ToolChannel.requestSync`).
      const session = await runOnce(pyodide, message, line, deliver, serving, { dir, snapshotPath });
      if (session === null) exit(0);
      await serveSession(codemode, session);
    } else if (typeof message.stubs === "string") {
      deliver(line); // `prepare`: Python compiles the stubs while it waits
    }
  }
}

// A session's later runs (its first came through `serve`): each `run` line goes to `_codemode.session_run`,
// which runs it in the same globals; its `done` echoes the run's number. Answers to calls of an earlier run
// that arrive late are skipped. Pyodide's own packages load at a session's first run only (read of their
// files is revoked then); wheels may come later.
async function serveSession(codemode: PyProxy, loaded: Set<string>): Promise<never> {
  for (;;) {
    const line = await reader.next();
    const raw = parseMessage(line);
    if (raw === null || raw.op !== "run") continue;
    let done: Message;
    let cut = false;
    let run: number | null = null;
    try {
      const message = parseRunMessage(raw);
      run = message.run;
      caps = message.artifacts; // each run's own caps, for its files and shown images
      output.reset(message.max_output);
      const missing = message.pyodide_packages.filter((name) => !loaded.has(name));
      if (missing.length > 0) {
        throw new Error(`a pyodide session loads Pyodide's packages at its first run only: ${missing.join(", ")}`);
      }
      done = doneFields(await (codemode.session_run as PyProxy).callPromising(line));
      if ("returnValue" in done) {
        const capped = capJson(done.returnValue as Json, message.max_output);
        done.returnValue = capped.value;
        cut = capped.cut;
      }
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      done = { success: false, error: { type: "RunnerError", message: text } };
    }
    finishRun(done, cut, run);
  }
}

async function runOnce(
  pyodide: Pyodide,
  raw: Message,
  line: string,
  deliver: (line: string) => void,
  serving: Promise<unknown>,
  paths: { dir: string; snapshotPath: string },
): Promise<Set<string> | null> {
  let done: Message;
  let cut = false;
  let session: Set<string> | null = null;
  let run: number | null = null;
  try {
    const message = parseRunMessage(raw);
    run = message.run;
    if (message.session) session = new Set(message.pyodide_packages);
    output.reset(message.max_output);
    caps = message.artifacts;
    const builds = message.pyodide_packages;
    if (builds.length > 0) {
      const errors: string[] = [];
      await pyodide.loadPackage(builds, { messageCallback: () => {}, errorCallback: (text) => errors.push(text) });
      if (errors.length > 0) throw new Error(`cannot load ${builds.join(", ")}: ${errors.join("; ")}`);
    }
    const self = new URL(import.meta.url).pathname;
    lockDown(message.allow_network, [paths.dir, paths.snapshotPath, self, new URL(RUNTIME_URL).pathname]);
    seal();
    bridgeState.runLine = line;
    deliver(line);
    done = doneFields(await serving);
    if ("returnValue" in done) {
      // The return value within the output cap, as every runner's: cut to its first `max_output`
      // characters of JSON otherwise (whatever the prelude did; the script may have rewritten it).
      const capped = capJson(done.returnValue as Json, message.max_output);
      done.returnValue = capped.value;
      cut = capped.cut;
    }
  } catch (error) {
    const text = error instanceof Error ? error.message : String(error);
    done = { success: false, error: { type: "RunnerError", message: text } };
  }
  finishRun(done, cut, run);
  return session;
}

/** A run's end, plain or a session's: the output so far, the workspace's files (before done: the host keeps what
 * arrives), then `done` with `dropped` (what Python dropped, a number or nothing; what was dropped here; a cut
 * value) and the run's number from the host's message (never the script's). */
function finishRun(done: Message, cut: boolean, run: number | null): void {
  output.flush();
  sendFiles(done.files, caps, workspace, (m) => writer.send(m));
  const theirs = Number.isSafeInteger(done.dropped) && (done.dropped as number) > 0 ? (done.dropped as number) : 0;
  const fields: Message = { ...done, op: "done", dropped: theirs + output.dropped + (cut ? 1 : 0) };
  if (run !== null) fields.run = run;
  else delete fields.run;
  output.flush(fields);
}

// What Python returned for the run: the script may have rewritten the prelude, so it is checked here (a
// JSON object, whose fields cannot set `op`; its `dropped` is added to this side's count).
function doneFields(result: unknown): Message {
  if (typeof result !== "string") throw new Error("the run did not return its result");
  const done = jsonParse(result);
  if (done === null || typeof done !== "object" || isArray(done)) throw new Error("the run's result is not an object");
  return done;
}

function lockDown(allowNetwork: boolean, readable: string[]): void {
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
  console.error(`usage: pyodide_worker.ts serve|snapshot PYODIDE_DIR PATH ...`);
  exit(2);
}
