/**
 * The worker program of the `deno` runner: one process per run, started ahead of time so that it is
 * warm when the run arrives.
 *
 * The host (runners/deno.py) starts it in the run's workspace with Deno's permissions limited to
 * reading and writing that directory, plus network (revoked below unless the run allows it); no
 * environment, subprocesses, FFI or system information. It talks to the host over JSON lines on
 * stdin and stdout (see mcp_code_mode/bridge/messages.py). It says "ready" once, before any script
 * ran; from the run message on, the host reads only the run's own messages (a script that reaches
 * fds 0 and 1 can write on them, so they are untrusted input about this run alone), and the process
 * never serves another run, except the further runs of its own session (see "sessions" below):
 *
 *   worker → host   {"op": "ready"}, {"op": "call", id, server, tool, arguments},
 *                   {"op": "output", data}, {"op": "progress", done, total, message},
 *                   {"op": "done", success, returnValue, error, dropped, files}
 *   host → worker   {"op": "run", code, language, allow_network, max_output, functions, unavailable?, packages},
 *                   {"op": "result", id, value} or {"op": "result", id, error: {message, server, tool}}
 *
 * Each server is a namespace of functions (`functions`: namespace → tool names): a Proxy whose unknown
 * names are functions that reject with the namespace's tool list. A server that is configured but down
 * (`unavailable`: namespace → reason) is a namespace whose every name throws that reason. The shared
 * parts (the line reader and writer, output, tool calls, return values, the run message's checks) are
 * in worker_runtime.ts, which the pyodide worker uses too.
 *
 * The script is imported as an ES module (TypeScript is transpiled by Deno, type errors are not
 * checked), so top-level await works and `export default value` is its return value. The run ends when
 * the script's event loop is empty, as a Node.js program ends: un-awaited promises and timers finish
 * first. Stdin is read only while a tool call is waiting for its answer, so it never keeps the loop
 * alive. Everything the script prints (console, Deno.stdout/stderr, process.stdout/stderr) is captured;
 * the process's real stdout carries only bridge messages.
 */

import { Console } from "node:console";
import type { Session as Inspector } from "node:inspector";
import type * as NodeModule from "node:module";
import process from "node:process";
import {
  badNames,
  encodeValue,
  type ErrorJson,
  isJsonObject,
  type Json,
  LineReader,
  MAX_FILES,
  type Message,
  MessageWriter,
  Output,
  parseMessage,
  parseRunMessage,
  ProgressReports,
  progressReport,
  type RunMessage,
  type SkillSpec,
  RUNTIME_URL,
  sendFiles,
  Shower,
  ToolChannel,
  ToolError,
  type WorkspaceFiles,
} from "./worker_runtime.ts";

/** Run by deno_supervisor.ts as a web Worker (isolate mode): one run in this isolate, messages by postMessage. */
const IN_ISOLATE = typeof (globalThis as { WorkerGlobalScope?: unknown }).WorkerGlobalScope === "function";

/** The parts of Deno's core that tell an isolate's end of run (see `idle`). */
interface Core {
  promiseIdSymbol: symbol;
  hasPromise(id: number): boolean;
  unrefOpPromise(promise: object): void;
  refOpPromise(promise: object): void;
  eventLoopHasMoreWork(): boolean;
  setLeakTracingEnabled(enabled: boolean): void;
  /** With leak tracing on: the kinds of what is pending (0 an async op, 2 a timer or interval), each to an id. */
  getAllLeakTraces(): Map<number, unknown>;
}
const internals = (Deno as unknown as Record<symbol, { core: Core }>)[(Deno as unknown as { internal: symbol }).internal];
const core: Core | null = IN_ISOLATE ? internals.core : null;

// Deno's internals (`Deno[Deno.internal]`: its core ops, the inspector's helpers, resource ids of its pipes) are
// this program's to use, never a script's: gone before any script runs. Deno's own code holds them by import.
delete (Deno as unknown as Record<symbol, unknown>)[(Deno as unknown as { internal: symbol }).internal];

// ----- what the bridge uses, captured before any script runs ----------------------------------

const stringify = JSON.stringify;
const parse = JSON.parse;
// node:module and node:inspector are loaded when a run needs them (require(), a session): about 10 ms of every
// worker's start otherwise.
const builtinModule = (process as unknown as { getBuiltinModule(name: string): unknown }).getBuiltinModule.bind(process);
let nodeModule: typeof NodeModule | null = null;
const moduleApi = (): typeof NodeModule => (nodeModule ??= builtinModule("node:module") as typeof NodeModule);
const realStdout = Deno.stdout;
const realStdin = Deno.stdin;
const realExit: (code?: number) => never = Deno.exit;
const realLstat = Deno.lstatSync;
const realOpen = Deno.openSync;
const workspace: WorkspaceFiles = {
  lstat: (path) => realLstat(path),
  open: (path) => realOpen(path, { read: true }),
};
let caps: RunMessage["artifacts"] = null;
const realSetTimeout = setTimeout;
const realClearTimeout = clearTimeout;
const unrefTimer = Deno.unrefTimer;
const inspect = Deno.inspect;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const WORKER_URL = import.meta.url;

const realPostMessage: (message: unknown, transfer?: Transferable[]) => void = IN_ISOLATE
  ? (globalThis as unknown as { postMessage: (m: unknown, t?: Transferable[]) => void }).postMessage.bind(globalThis)
  : () => {};

/** The host's lines in isolate mode: the supervisor forwards each (a string) by postMessage. */
class Inbox {
  private readonly chunks: Uint8Array[] = [];
  private wake: (() => void) | null = null;

  push(line: string): void {
    this.chunks.push(encoder.encode(line + "\n"));
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  async read(p: Uint8Array): Promise<number> {
    while (this.chunks.length === 0) await new Promise<void>((resolve) => (this.wake = resolve));
    const first = this.chunks[0];
    const count = Math.min(p.length, first.length);
    p.set(first.subarray(0, count));
    if (count === first.length) this.chunks.shift();
    else this.chunks[0] = first.subarray(count);
    return count;
  }
}
const inbox = new Inbox();

const writer = IN_ISOLATE
  ? new MessageWriter((p) => (realPostMessage(p), p.length))
  : new MessageWriter((p) => realStdout.writeSync(p));
const reader = IN_ISOLATE
  ? new LineReader(
    (p) => inbox.read(p),
    () => {
      throw new Error("an isolate reads nothing synchronously");
    },
    () => realExit(0),
  )
  : new LineReader((p) => realStdin.read(p), (p) => realStdin.readSync(p), () => realExit(0));

/** The next message from the host (waiting for the run); the process exits when the host has gone. */
async function receive(): Promise<Message> {
  for (;;) {
    const message = parseMessage(await reader.next());
    if (message) return message;
  }
}

// ----- printed output ---------------------------------------------------------------------------

// Pending output is also sent by a timer, once the script's synchronous work is over (an unref'd
// timer: it never keeps the run alive).
const output = new Output(writer, {
  set(callback, ms) {
    const id = realSetTimeout(callback, ms);
    unrefTimer(id);
    return id;
  },
  clear: (id) => realClearTimeout(id as number),
});
const tools = new ToolChannel(writer, reader, output);
const progress = new ProgressReports(writer, output, {
  set(callback, ms) {
    const id = realSetTimeout(callback, ms);
    unrefTimer(id);
    return id;
  },
  clear: (id) => realClearTimeout(id as number),
});

/** `reportProgress(done, total?, message?)` (also `report_progress`): the client's MCP progress, a few a second. */
function reportProgress(done: unknown, total?: unknown, message?: unknown): void {
  const report = progressReport(done, total, message);
  if (typeof report === "string") throw new TypeError(`reportProgress(done, total, message): ${report}`);
  progress.report(report);
}

function text(chunk: unknown): string {
  return typeof chunk === "string" ? chunk : chunk instanceof Uint8Array ? decoder.decode(chunk) : String(chunk);
}

/** Route every way a script can print into `output`; stdin reads nothing (the bridge owns it). */
function captureOutput(): void {
  const sink = {
    write(chunk: unknown, ...rest: unknown[]): boolean {
      output.write(text(chunk));
      const callback = rest.find((r) => typeof r === "function") as (() => void) | undefined;
      callback?.();
      return true;
    },
    once: () => sink,
    on: () => sink,
    removeListener: () => sink,
    listenerCount: () => 0,
    isTTY: false,
  };
  globalThis.console = new Console({ stdout: sink as never, stderr: sink as never, colorMode: false });
  const fakeFile = {
    write: (p: Uint8Array) => (output.write(decoder.decode(p)), Promise.resolve(p.length)),
    writeSync: (p: Uint8Array) => (output.write(decoder.decode(p)), p.length),
    writable: new WritableStream<Uint8Array>({ write: (p) => output.write(decoder.decode(p)) }),
    isTerminal: () => false,
    close: () => {},
  };
  const closedStdin = {
    read: () => Promise.resolve(null),
    readSync: () => null,
    readable: new ReadableStream<Uint8Array>({ start: (c) => c.close() }),
    isTerminal: () => false,
    close: () => {},
  };
  for (const [name, value] of [["stdout", fakeFile], ["stderr", fakeFile], ["stdin", closedStdin]] as const) {
    Object.defineProperty(Deno, name, { value, configurable: true, writable: true });
  }
  for (const stream of [process.stdout, process.stderr]) {
    stream.write = sink.write as typeof stream.write;
  }
}

// ----- tools --------------------------------------------------------------------------------------

/** Servers that are configured but down (the run message's `unavailable`): namespace → reason. */
let unavailable: Record<string, string> = {};

/** A name quoted as Python's repr() quotes it: the host's messages about servers and tools read the same. */
function quoted(name: string): string {
  if (name.includes("'") && !name.includes('"')) return `"${name}"`;
  return `'${name.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
}

function notAvailable(namespace: string): ToolError {
  return new ToolError(`server ${quoted(namespace)} is not available: ${unavailable[namespace]}`, namespace, null);
}

function callTool(server: string, tool: string, args: unknown = {}): Promise<unknown> {
  const failure = new ToolError("", server, tool);
  const badName = badNames(server, tool);
  if (badName) return Promise.reject(new TypeError(`callTool(server, tool, args): ${badName}`));
  if (Object.hasOwn(unavailable, server)) return Promise.reject(notAvailable(server));
  if (args === undefined || args === null) args = {};
  if (!isJsonObject(args)) {
    return Promise.reject(new TypeError(`the arguments of ${server}.${tool} must be an object, e.g. { path: "a.txt" }`));
  }
  let payload: { [key: string]: Json };
  try {
    payload = parse(stringify(args));
  } catch (error) {
    return Promise.reject(new TypeError(`the arguments of ${server}.${tool} must be JSON values: ${error}`));
  }
  const where = userFrame().exec(failure.stack ?? "");
  return tools.request(server, tool, payload, where ? Number(where[1]) : undefined).then((line) => {
    const message = parse(line) as Message;
    const error = message.error as { message?: string; server?: string; tool?: string } | undefined;
    if (error) {
      failure.message = error.message ?? "the tool failed";
      failure.server = error.server ?? null;
      failure.tool = error.tool ?? null;
      throw failure;
    }
    return message.value ?? null;
  });
}

/** Define a property (never a setter call: a tool or server may be called `__proto__`). */
function define(target: object, name: string, value: unknown): void {
  Object.defineProperty(target, name, { value, enumerable: true, writable: true, configurable: true });
}

/** Names that code probes on any object (awaiting it, printing it, serializing it): they stay undefined. */
const PROBED = new Set(["then", "toJSON", "inspect", "asymmetricMatch", "$$typeof", "nodeType"]);

function probed(key: string | symbol, target: object): boolean {
  return typeof key === "symbol" || PROBED.has(key) || key in target;
}

/** What a server's object has besides its tools (a tool of the same name wins): its resources and prompts,
 * asked with reserved names no MCP tool can have. */
const SERVER_CALLS: Record<string, (namespace: string) => (...args: unknown[]) => Promise<unknown>> = {
  list_resources: (ns) => () => callTool(ns, "resources/list", {}),
  read_resource: (ns) => (uri) => callTool(ns, "resources/read", { uri }),
  list_prompts: (ns) => () => callTool(ns, "prompts/list", {}),
  get_prompt: (ns) => (name, args) => callTool(ns, "prompts/get", args === undefined ? { name } : { name, arguments: args }),
};

/** A server's namespace: its tools, and for any other name a function that says which tools there are. */
function toolNamespace(namespace: string, names: string[]): object {
  const object = {};
  for (const [name, make] of Object.entries(SERVER_CALLS)) {
    // Not enumerable: the namespace lists (Object.keys, console.log) its tools only.
    if (!names.includes(name)) Object.defineProperty(object, name, { value: make(namespace), writable: true, configurable: true });
  }
  for (const name of names) {
    define(object, name, { [name]: (args?: unknown) => callTool(namespace, name, args) }[name]);
  }
  Object.freeze(object);
  const listed = names.length ? names.join(", ") : "none";
  return new Proxy(object, {
    get(target, key, receiver) {
      if (probed(key, target)) return Reflect.get(target, key, receiver);
      const name = String(key);
      return {
        [name]: (): Promise<never> =>
          Promise.reject(
            new ToolError(`server ${quoted(namespace)} has no tool ${quoted(name)} (its tools: ${listed})`, namespace, name),
          ),
      }[name];
    },
  });
}

/** The namespace of a server that is configured but down: every use of it says so. */
function unavailableNamespace(namespace: string): object {
  const object = Object.freeze(Object.create(null));
  return new Proxy(object, {
    get(target, key) {
      if (typeof key === "symbol" || PROBED.has(key)) return Reflect.get(target, key);
      throw notAvailable(namespace);
    },
  });
}

function defineTools(functions: Record<string, string[]>): void {
  for (const [namespace, names] of Object.entries(functions)) {
    if (!Object.hasOwn(unavailable, namespace)) define(globalThis, namespace, toolNamespace(namespace, names));
  }
  for (const namespace of Object.keys(unavailable)) define(globalThis, namespace, unavailableNamespace(namespace));
  define(globalThis, "callTool", callTool);
  define(globalThis, "ToolError", ToolError);
  define(globalThis, "reportProgress", reportProgress);
  define(globalThis, "report_progress", reportProgress);
}

// ----- skills: saved functions the host sends with the run, imported on first call --------------------

const JSON_CHECKS: Record<string, (v: unknown) => boolean> = {
  string: (v) => typeof v === "string",
  integer: (v) => Number.isInteger(v),
  number: (v) => typeof v === "number",
  boolean: (v) => typeof v === "boolean",
  array: (v) => Array.isArray(v),
  object: (v) => isJsonObject(v),
  null: (v) => v === null,
};

/** A skill's arguments checked against its parameters schema: a TypeError naming the parameter otherwise. */
function skillArguments(name: string, schema: { [key: string]: Json }, args: unknown): { [key: string]: Json } {
  if (args === undefined || args === null) args = {};
  if (!isJsonObject(args)) throw new TypeError(`skills.${name}() takes one object of arguments, e.g. { path: "." }`);
  const props = isJsonObject(schema.properties) ? schema.properties : {};
  const names = Object.keys(props);
  if (schema.additionalProperties !== true) {
    const unknown = Object.keys(args).find((k) => !Object.hasOwn(props, k));
    if (unknown !== undefined) {
      throw new TypeError(`skills.${name}() has no parameter '${unknown}' (parameters: ${names.join(", ") || "none"})`);
    }
  }
  const required = Array.isArray(schema.required) ? schema.required : [];
  const missing = required.find((r) => typeof r === "string" && !Object.hasOwn(args as object, r));
  if (missing !== undefined) throw new TypeError(`skills.${name}() is missing the required parameter '${missing}'`);
  for (const [key, value] of Object.entries(args)) {
    const sub = props[key];
    const kind = isJsonObject(sub) ? sub.type : undefined;
    const kinds = (Array.isArray(kind) ? kind : [kind]).filter((k): k is string => typeof k === "string" && k in JSON_CHECKS);
    if (kinds.length && !kinds.some((k) => JSON_CHECKS[k](value))) {
      throw new TypeError(`skills.${name}(): parameter '${key}' must be ${kinds.join(" or ")}, not ${typeof value}`);
    }
  }
  return args;
}

/** `skills` in a JS/TS run: each skill's module (its default export is the function) is imported on its first
 * call, in this realm, so its tool calls are this run's own. A skill the host refused throws its reason. */
function defineSkills(skills: SkillSpec[]): void {
  const object: Record<string, unknown> = {};
  for (const skill of skills) {
    let loaded: Promise<{ default?: unknown }> | undefined;
    const call = async (args?: unknown): Promise<unknown> => {
      if (skill.refused !== null) throw new ToolError(skill.refused, null, null);
      const checked = skillArguments(skill.name, skill.schema, args);
      loaded ??= import(`data:application/${skill.language};base64,${encodeBase64(skill.source ?? "")}`);
      const module = await loaded;
      if (typeof module.default !== "function") throw new TypeError(`skills.${skill.name}: its code exports no function`);
      return await (module.default as (a: unknown) => unknown)(checked);
    };
    define(object, skill.name, { [skill.name]: call }[skill.name]);
  }
  Object.freeze(object);
  const listed = skills.length ? skills.map((s) => s.name).join(", ") : "none";
  define(
    globalThis,
    "skills",
    new Proxy(object, {
      get(target, key, receiver) {
        if (probed(key, target)) return Reflect.get(target, key, receiver);
        const name = String(key);
        return {
          [name]: (): Promise<never> =>
            Promise.reject(new TypeError(`no skill '${name}' (skills: ${listed}; save one with save_skill)`)),
        }[name];
      },
    }),
  );
}

// ----- require() for Node.js built-ins and the run's npm packages ---------------------------------

/** What Node's require() returns for a module that Deno imported as ESM. */
function interop(namespace: Record<string, unknown>): unknown {
  if ("module.exports" in namespace) return namespace["module.exports"];
  const main = namespace.default;
  if (main === undefined || main === null || (typeof main !== "object" && typeof main !== "function")) {
    return namespace;
  }
  if (Object.keys(namespace).every((key) => key === "default")) return main;
  return new Proxy(main as object, {
    get: (target, key) => (key in target ? Reflect.get(target, key) : namespace[key as string]),
    has: (target, key) => key in target || key in namespace,
  });
}

function defineRequire(loaded: Map<string, Record<string, unknown>>): void {
  const base = `file://${Deno.cwd()}/`;
  let nodeRequire: NodeJS.Require | null = null;
  (globalThis as Record<string, unknown>).require = function require(name: string): unknown {
    const found = loaded.get(name);
    if (found) return interop(found);
    if (typeof name === "string" && moduleApi().isBuiltin(name)) {
      return (nodeRequire ??= moduleApi().createRequire(base))(name);
    }
    throw new Error(
      `Cannot find module '${name}': require() loads Node.js built-ins and allowed npm packages named ` +
        "with a string literal, e.g. require('axios') (see list_allowed_packages)",
    );
  };
}

// ----- errors ---------------------------------------------------------------------------------------

const USER_FRAME = /data:application\/(?:typescript|javascript);base64,[A-Za-z0-9+/=.]*:(\d+):(\d+)/;
/** A session's code is evaluated as `<anonymous>` (V8's REPL mode ignores a sourceURL). */
const SESSION_FRAME = /<anonymous>:(\d+):(\d+)/;

function userFrame(): RegExp {
  return inSession ? SESSION_FRAME : USER_FRAME;
}

function cleanStack(stack: string): string {
  return stack
    .split("\n")
    .filter((line) => !line.includes(WORKER_URL) && !line.includes(RUNTIME_URL) && !/\(?ext:|\(node:|at node:/.test(line))
    .filter((line) => !(inSession && line.trim() === "at new Promise (<anonymous>)"))
    .map((line) => line.replace(new RegExp(userFrame().source, "g"), "<script>:$1:$2"))
    .map((line) => line.replace(/file:\/\/\/\S*?\/npm\/[^/]+\//g, "npm:"))
    .join("\n");
}

function describe(error: unknown): ErrorJson {
  if (!(error instanceof Error)) {
    const shown = typeof error === "string" ? error : inspect(error);
    return { type: "Error", message: `uncaught ${shown}`, line: null, traceback: null };
  }
  let type = error.name || "Error";
  let message = String(error.message);
  const syntax = /^SyntaxError: (.*)/.exec(message);
  if (syntax) {
    // A parse error of the script: Deno reports it with a code frame and the location.
    const where = userFrame().exec(message);
    type = "SyntaxError";
    const first = syntax[1].split("\n")[0];
    message = where ? `${first} (line ${where[1]}, column ${where[2]})` : first;
    const frame = cleanStack(String(error.message)).split("\n").slice(1).join("\n").trim();
    return { type, message, line: where ? Number(where[1]) : null, traceback: frame || null };
  }
  const stack = String(error.stack ?? "");
  const where = userFrame().exec(stack);
  const traceback = cleanStack(stack).trim();
  return { type, message, line: where ? Number(where[1]) : null, traceback: traceback || null };
}

// ----- files and the result ---------------------------------------------------------------------------

function listFiles(): { path: string; size: number }[] {
  const files: { path: string; size: number }[] = [];
  const walk = (dir: string): void => {
    let entries: Deno.DirEntry[];
    try {
      entries = [...Deno.readDirSync(dir)].sort((a, b) => (a.name < b.name ? -1 : 1));
    } catch {
      return;
    }
    for (const entry of entries.filter((e) => !e.isDirectory)) {
      if (files.length >= MAX_FILES) return;
      const path = dir === "." ? entry.name : `${dir}/${entry.name}`;
      try {
        files.push({ path, size: Deno.lstatSync(path).size });
      } catch {
        continue;
      }
    }
    for (const entry of entries.filter((e) => e.isDirectory)) walk(dir === "." ? entry.name : `${dir}/${entry.name}`);
  };
  walk(".");
  return files;
}

let phase: "waiting" | "running" | "evaluated" | "finished" = "waiting";
let returnValue: unknown = undefined;
/** Set by a session's first run: the process then serves the session's further runs. */
let inSession = false;
/** The number of the session's current run, echoed in its `done` (the host ignores a `done` without it). */
let runNumber: number | null = null;

function finish(success: boolean, error: ErrorJson | null = null): void {
  if (phase === "finished") return;
  phase = "finished";
  // Encoded before the flush: a toJSON() may still print. A value larger than the output cap is cut to
  // its first `max_output` characters of JSON, as the cpython runner cuts it, and the run is truncated.
  const { value, cut } = success ? encodeValue(returnValue, output.cap, inspect) : { value: null, cut: false };
  const dropped = output.dropped + (cut ? 1 : 0);
  const files = listFiles();
  progress.flush(); // the last report goes out before done
  output.flush();
  sendFiles(files, caps, workspace, (message) => writer.send(message)); // before done: the host keeps what arrives
  const done: Message = { op: "done", success, returnValue: value, error, dropped, files };
  if (runNumber !== null) done.run = runNumber;
  output.flush(done);
}

function fail(error: unknown): never {
  finish(false, describe(error));
  realExit(0);
}

/** An error outside the session's evaluation (a timer, a promise nobody awaited): it ends the current run with
 * that error, if one is going on; the process goes on serving the session. */
function failInSession(error: unknown): void {
  if (phase === "running" || phase === "evaluated") finish(false, describe(error));
}

// The script's event loop is empty: it has finished, as a Node.js program would. (A script whose
// top-level await can never settle makes Deno exit with an error instead; the host reports that.)
/** As runners/_deno_errors.py says it for a process, whose Deno exits with the line of the await (not known here). */
const AWAIT_NEVER_SETTLES: ErrorJson = {
  type: "Error",
  message: "the script awaits a promise that never settles (nothing is left that could resolve it)",
  line: null,
  traceback: null,
};
const NEVER_SETTLES: ErrorJson = {
  type: "Error",
  message: "the script's default export is a promise that never settles (nothing is left that could resolve it)",
  line: null,
  traceback: null,
};
addEventListener("beforeunload", () => {
  if (phase === "evaluated") finish(true);
  else if (phase === "running") finish(false, NEVER_SETTLES);
});
addEventListener("unload", () => {
  if (phase === "evaluated") finish(true);
  else if (phase === "running") finish(false, NEVER_SETTLES);
});
addEventListener("unhandledrejection", (event) => {
  event.preventDefault();
  if (inSession) failInSession(event.reason);
  else fail(event.reason);
});
addEventListener("error", (event) => {
  event.preventDefault();
  if (inSession) failInSession(event.error ?? new Error(event.message));
  else fail(event.error ?? new Error(event.message));
});

function encodeBase64(source: string): string {
  const bytes = encoder.encode(source);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function exitWith(code?: number): never {
  if (code) finish(false, { type: "Exit", message: `the script exited with code ${code}`, line: null, traceback: null });
  else finish(true);
  realExit(0);
}

async function run(message: RunMessage): Promise<void> {
  if (!message.allow_network) Deno.permissions.revokeSync({ name: "net" });
  Deno.permissions.revokeSync({ name: "sys", kind: "inspector" } as unknown as Deno.PermissionDescriptor);
  output.reset(message.max_output);
  unavailable = message.unavailable;
  caps = message.artifacts;
  defineTools(message.functions);
  defineSkills(message.skills);
  const shower = new Shower(caps, workspace, (m) => output.flush(m));
  if (!Object.hasOwn(globalThis, "show")) define(globalThis, "show", (image: unknown) => shower.show(image)); // a server named show wins
  const loaded = new Map<string, Record<string, unknown>>();
  phase = "running";
  try {
    for (const { name, specifier } of message.packages) loaded.set(name, await import(specifier));
    defineRequire(loaded);
    const kind = message.language === "typescript" ? "typescript" : "javascript";
    evaluating = true;
    const module = await import(`data:application/${kind};base64,${encodeBase64(message.code)}`);
    evaluating = false;
    returnValue = await module.default;
  } catch (error) {
    fail(error);
  }
  phase = "evaluated";
  if (IN_ISOLATE) {
    settle();
    realPostMessage({ op: "evaluated" }); // the supervisor ticks at once: the end is found now
  }
}

// ----- sessions -------------------------------------------------------------------------------------
//
// A session's code is evaluated in the global scope as a REPL evaluates it (V8's REPL mode, through an
// inspector session the worker opens before any script runs; the permission to open one is then revoked):
// top-level `const`, `let`, `class`, `function` and `var` of one run are globals of the next, a later run may
// declare them again, and top-level await works. TypeScript has its types stripped first (positions kept). A
// run ends when its evaluation (and the promise of its top-level awaits) has settled; promises and timers it
// did not await go on in the background, into the next run. Its value is the last expression statement's.

let inspector: Inspector | null = null;
type InspectorPost = (
  this: Inspector | null,
  method: string,
  params: Record<string, unknown>,
  callback: (error: Error | null, result: Record<string, unknown>) => void,
) => void;
/** The inspector's `post`, taken at the session's first run, before its script (a script may replace it later). */
let inspectorPost: InspectorPost | null = null;
const CAPTURE = `__codeModeCapture${crypto.randomUUID().replaceAll("-", "")}`;
let captured: unknown = undefined;
const sessionPackages = new Map<string, Record<string, unknown>>();

interface RemoteObject {
  type: string;
  value?: unknown;
  unserializableValue?: string;
  objectId?: string;
}

function post(method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    inspectorPost!.call(inspector, method, params, (error: Error | null, result: Record<string, unknown>) => {
      if (error) reject(error);
      else resolve(result ?? {});
    });
  });
}

/** The value an evaluation produced, as the script's own object (not a copy). */
async function valueOf(remote: RemoteObject): Promise<unknown> {
  if (remote.objectId === undefined) {
    const special = remote.unserializableValue;
    if (special === undefined) return remote.value;
    return special.endsWith("n") ? BigInt(special.slice(0, -1)) : Number(special);
  }
  define(globalThis, CAPTURE, (value: unknown) => (captured = value));
  try {
    await post("Runtime.callFunctionOn", {
      objectId: remote.objectId,
      functionDeclaration: `function () { globalThis[${stringify(CAPTURE)}](this); }`,
    });
  } finally {
    delete (globalThis as Record<string, unknown>)[CAPTURE];
  }
  const value = captured;
  captured = undefined;
  return value;
}

function sessionSource(message: RunMessage): string {
  let code = message.code;
  if (message.language === "typescript") {
    try {
      code = moduleApi().stripTypeScriptTypes(code, { mode: "strip" });
    } catch {
      code = moduleApi().stripTypeScriptTypes(code, { mode: "transform" }); // enums and namespaces
    }
  }
  return code;
}

async function runInSession(message: RunMessage, first: boolean): Promise<void> {
  if (first) {
    if (!message.allow_network) Deno.permissions.revokeSync({ name: "net" });
    const { Session } = builtinModule("node:inspector") as typeof import("node:inspector");
    inspectorPost = Session.prototype.post as unknown as InspectorPost;
    inspector = new Session();
    moduleApi(); // node:module too, before any script of the session
    inspector.connect();
    Deno.permissions.revokeSync({ name: "sys", kind: "inspector" } as unknown as Deno.PermissionDescriptor);
    inSession = true;
  }
  runNumber = message.run;
  returnValue = undefined;
  output.reset(message.max_output);
  unavailable = message.unavailable;
  defineTools(message.functions);
  defineSkills(message.skills);
  caps = message.artifacts;
  const shower = new Shower(caps, workspace, (m) => output.flush(m)); // a new one per run: its caps are the run's
  if (!Object.hasOwn(message.functions, "show")) define(globalThis, "show", (image: unknown) => shower.show(image));
  phase = "running";
  try {
    for (const { name, specifier } of message.packages) {
      if (!sessionPackages.has(name)) sessionPackages.set(name, await import(specifier));
    }
    defineRequire(sessionPackages);
    const code = sessionSource(message);
    const answer = await post("Runtime.evaluate", { expression: code, replMode: true, awaitPromise: true });
    const details = answer.exceptionDetails as { exception?: RemoteObject; text?: string } | undefined;
    if (details) {
      const error = details.exception ? await valueOf(details.exception) : new Error(details.text ?? "error");
      finish(false, describe(error));
      return;
    }
    returnValue = await valueOf(answer.result as RemoteObject);
  } catch (error) {
    finish(false, describe(error));
    return;
  }
  finish(true);
}

async function serveSession(first: RunMessage): Promise<void> {
  await runInSession(first, true);
  for (;;) {
    const message = await receive();
    if (message.op !== "run") continue; // a late answer to a call of an earlier run
    let checked: RunMessage;
    try {
      checked = parseRunMessage(message);
    } catch (error) {
      runNumber = typeof message.run === "number" ? message.run : null;
      phase = "running";
      finish(false, describe(new Error(`the run message is not valid: ${(error as Error).message}`)));
      continue;
    }
    await runInSession(checked, false);
  }
}

const PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"];
const realFetch = globalThis.fetch;

/** A proxy variable, if this worker may read it (`--allow-env` names them) and it is set. */
function proxyVariable(name: string): string | undefined {
  if (Deno.permissions.querySync({ name: "env", variable: name }).state !== "granted") return undefined;
  return Deno.env.get(name);
}

/** `fetch` that says why the egress proxy refused a tunnel: Deno reports only "unsuccessful tunnel", so the
 * worker asks the proxy (`http://egress.invalid/refusal`, answered by the host, never resolved) and puts
 * the host and the rule in the error. Everything else is the real `fetch`. */
function explainingFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  return realFetch(input, init).catch(async (error: unknown) => {
    const cause = error instanceof Error ? String(error.cause ?? "") : "";
    if (!(error instanceof TypeError) || !cause.includes("unsuccessful tunnel")) throw error;
    let why = "";
    try {
      const url = new URL(input instanceof Request ? input.url : String(input));
      const port = url.port || (url.protocol === "https:" ? "443" : "80");
      const query = encodeURIComponent(`${url.hostname}:${port}`);
      why = (await (await realFetch(`http://egress.invalid/refusal?target=${query}`)).text()).trim();
    } catch {
      // no proxy to ask: the original error stands
    }
    throw why ? new TypeError(`fetch failed: ${why}`, { cause: error }) : error;
  });
}

// ----- isolate mode: one run in a web Worker of deno_supervisor.ts ----------------------------------------
//
// The supervisor forwards the host's lines (strings) and sends {op: "run"} and {op: "tick"} (objects). A Worker's
// event loop is never empty (the runtime always waits for the next message), so the end of a run is found here:
// at each tick, once the script's module has evaluated and no tool call waits for its answer, the runtime's
// pending message receive is unreferenced for one synchronous look at whether anything else is left (timers,
// reads, fetches, promises the script did not await). A default export that can never settle is found the same
// way; a top-level await that cannot (a module's evaluation counts as work) once nothing that could settle it has
// been pending for STALLED_MS (no call, no timer, no op).

let scanFrom = 0;

/** The pending op promises, oldest first (the last one, in a microtask of a message, is the runtime's receive). */
function pendingOps(core: Core): number[] {
  const pending: number[] = [];
  let gap = 0;
  for (let id = scanFrom; gap < 1000; id++) {
    if (core.hasPromise(id)) {
      pending.push(id);
      gap = 0;
    } else gap++;
  }
  if (pending.length > 0) scanFrom = pending[0];
  return pending;
}

/** Whether nothing but the runtime's message receive is left in this isolate's event loop. */
function loopIsIdle(core: Core): boolean {
  const receive = pendingOps(core).at(-1);
  if (receive === undefined) return false;
  // The newest pending op promise, in a microtask of a message: the receive the runtime issued for the next one.
  // Were it another, this reads true (the receive still counts): a wrong pick only puts the end off.
  const promise = { [core.promiseIdSymbol]: receive };
  core.unrefOpPromise(promise);
  const more = core.eventLoopHasMoreWork();
  core.refOpPromise(promise);
  return !more;
}

/** How long a top-level await may wait with nothing left that could settle it (no call, timer or op) before the
 * run ends as one that never settles: a module's pending evaluation counts as work, so it is told apart this way. */
const STALLED_MS = 1000;
let evaluating = false;
let stalledSince: number | null = null;

/** A timer that keeps the loop busy until the microtasks of what just happened (an answer handed to its caller, the
 * module's evaluation) have all run: a tick received meanwhile cannot find the loop idle before they had their say
 * (a message can be received, and ticked, between two of those microtasks). */
function settle(): void {
  realSetTimeout(() => {}, 0);
}

function checkEnd(): void {
  if (core === null || tools.pending > 0 || (phase !== "running" && phase !== "evaluated")) return;
  if (loopIsIdle(core)) {
    // Evaluated: the run is over. Still running (awaiting its default export): nothing is left to settle it.
    if (phase === "evaluated") finish(true);
    else finish(false, NEVER_SETTLES);
    return;
  }
  const waiting = evaluating && pendingOps(core).length <= 1 && !core.getAllLeakTraces().has(2);
  if (!waiting) {
    stalledSince = null;
  } else if (stalledSince === null) {
    stalledSince = performance.now();
  } else if (performance.now() - stalledSince >= STALLED_MS) {
    finish(false, AWAIT_NEVER_SETTLES);
  }
}

function onSupervisorMessage(event: Event): void {
  const data: unknown = (event as MessageEvent).data;
  if (typeof data === "string") {
    inbox.push(data);
    settle();
    return;
  }
  if (!isJsonObject(data)) return;
  if (data.op === "tick") {
    queueMicrotask(checkEnd);
  } else if (data.op === "run" && phase === "waiting") {
    let checked: RunMessage;
    try {
      checked = parseRunMessage(data);
    } catch (error) {
      phase = "running";
      fail(new Error(`the run message is not valid: ${(error as Error).message}`));
    }
    const proxy = isJsonObject(data.proxy) ? data.proxy : {};
    process.env = Object.fromEntries(
      PROXY_VARIABLES.flatMap((name) => (typeof proxy[name] === "string" && proxy[name] ? [[name, proxy[name]]] : [])),
    );
    if (typeof proxy.HTTPS_PROXY === "string" && proxy.HTTPS_PROXY) globalThis.fetch = explainingFetch;
    run(checked);
  }
}

async function mainInIsolate(): Promise<void> {
  core!.setLeakTracingEnabled(true); // for checkEnd: whether a timer is pending
  captureOutput();
  output.reset(0);
  console.log("warm", 1, { a: [1.5, "b"] }, new Error("warm").message);
  output.reset();
  process.env = {};
  Deno.exit = exitWith;
  process.exit = exitWith as typeof process.exit;
  define(globalThis, "close", () => exitWith(0)); // a Worker's own close(): the run ends as by exit()
  delete (globalThis as Record<string, unknown>).Worker; // a run starts no isolate of its own
  await import(`data:application/typescript;base64,${encodeBase64("export const warm: number = 1;")}`);
  addEventListener("message", onSupervisorMessage);
  realPostMessage({ op: "ready" });
}

async function main(): Promise<void> {
  // Everything that does not depend on the run is done before saying ready: capturing output,
  // hiding the environment, warming up the TypeScript transpiler and the module loader.
  captureOutput();
  output.reset(0); // the warm-up's output is dropped, never sent
  // The first console.log loads and compiles node's formatting code: about 5 ms, paid here, not by the run.
  console.log("warm", 1, { a: [1.5, "b"] }, new Error("warm").message);
  output.reset();
  // The environment a script sees: the egress proxy's variables alone (set by cm_launch.py when the run
  // may use the network, naming the forwarder to the host's proxy; npm clients such as axios read them).
  process.env = Object.fromEntries(PROXY_VARIABLES.flatMap((name) => {
    const value = proxyVariable(name);
    return value ? [[name, value]] : [];
  }));
  if (proxyVariable("HTTPS_PROXY")) globalThis.fetch = explainingFetch;
  Deno.exit = exitWith;
  process.exit = exitWith as typeof process.exit;
  await import(`data:application/typescript;base64,${encodeBase64("export const warm: number = 1;")}`);
  writer.send({ op: "ready" });
  for (;;) {
    const message = await receive();
    if (message.op === "run") {
      let checked: RunMessage;
      try {
        checked = parseRunMessage(message);
      } catch (error) {
        phase = "running";
        fail(new Error(`the run message is not valid: ${(error as Error).message}`));
      }
      if (checked.session) serveSession(checked);
      else run(checked);
      return;
    }
  }
}

if (IN_ISOLATE) mainInIsolate();
else main();
