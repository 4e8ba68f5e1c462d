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
 * never serves another run:
 *
 *   worker → host   {"op": "ready"}, {"op": "call", id, server, tool, arguments},
 *                   {"op": "output", data}, {"op": "done", success, returnValue, error, dropped, files}
 *   host → worker   {"op": "run", code, language, allow_network, max_output, functions, packages},
 *                   {"op": "result", id, value} or {"op": "result", id, error: {message, server, tool}}
 *
 * The script is imported as an ES module (TypeScript is transpiled by Deno, type errors are not
 * checked), so top-level await works and `export default value` is its return value. The run ends when
 * the script's event loop is empty, as a Node.js program ends: un-awaited promises and timers finish
 * first. Stdin is read only while a tool call is waiting for its answer, so it never keeps the loop
 * alive. Everything the script prints (console, Deno.stdout/stderr, process.stdout/stderr) is captured;
 * the process's real stdout carries only bridge messages.
 */

import { Console } from "node:console";
import { createRequire, isBuiltin } from "node:module";
import process from "node:process";

// ----- what the bridge uses, captured before any script runs ----------------------------------

const stringify = JSON.stringify;
const parse = JSON.parse;
const realStdout = Deno.stdout;
const realStdin = Deno.stdin;
const realExit: (code?: number) => never = Deno.exit;
const realSetTimeout = setTimeout;
const realClearTimeout = clearTimeout;
const unrefTimer = Deno.unrefTimer;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const WORKER_URL = import.meta.url;
const CHUNK_CHARS = 8192;
const FLUSH_MS = 50;
const MAX_FILES = 200;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface ErrorJson {
  type: string;
  message: string;
  line: number | null;
  traceback: string | null;
}

interface RunMessage {
  op: "run";
  code: string;
  language: "javascript" | "typescript";
  max_output: number;
  allow_network: boolean;
  functions: Record<string, string[]>;
  packages: { name: string; specifier: string }[];
}

function send(...messages: Record<string, unknown>[]): void {
  const bytes = encoder.encode(messages.map((m) => stringify(m) + "\n").join(""));
  let written = 0;
  while (written < bytes.length) written += realStdout.writeSync(bytes.subarray(written));
}

let inbox = new Uint8Array(0);

function takeMessage(): Record<string, unknown> | null {
  const newline = inbox.indexOf(10);
  if (newline < 0) return null;
  const line = inbox.subarray(0, newline);
  inbox = inbox.slice(newline + 1);
  return parse(decoder.decode(line));
}

function addInput(chunk: Uint8Array, n: number | null): void {
  if (n === null) realExit(0); // the host has gone
  const grown = new Uint8Array(inbox.length + n!);
  grown.set(inbox);
  grown.set(chunk.subarray(0, n!), inbox.length);
  inbox = grown;
}

/** The next message from the host (waiting for the run); the process exits when the host has gone. */
async function receive(): Promise<Record<string, unknown>> {
  for (;;) {
    const message = takeMessage();
    if (message) return message;
    const chunk = new Uint8Array(65536);
    addInput(chunk, await realStdin.read(chunk));
  }
}

/** The same, blocking: once the run has started, only tool calls read, and only this way. */
function receiveSync(): Record<string, unknown> {
  for (;;) {
    const message = takeMessage();
    if (message) return message;
    const chunk = new Uint8Array(65536);
    addInput(chunk, realStdin.readSync(chunk));
  }
}

// ----- printed output ---------------------------------------------------------------------------

class Output {
  used = 0;
  dropped = 0;
  private pending: string[] = [];
  private pendingChars = 0;
  private timer: ReturnType<typeof realSetTimeout> | null = null;

  constructor(public cap: number) {}

  write(text: string): void {
    const room = this.cap - this.used;
    if (text.length > room) {
      this.dropped += text.length - Math.max(room, 0);
      text = text.slice(0, Math.max(room, 0));
    }
    if (!text) return;
    this.used += text.length;
    this.pending.push(text);
    this.pendingChars += text.length;
    if (this.pendingChars >= CHUNK_CHARS) this.flush();
    else if (this.timer === null) {
      this.timer = realSetTimeout(() => this.flush(), FLUSH_MS);
      unrefTimer(this.timer);
    }
  }

  /** Forget what was written (the warm-up's), as if nothing had been. */
  reset(): void {
    if (this.timer !== null) realClearTimeout(this.timer);
    this.timer = null;
    this.pending = [];
    this.pendingChars = 0;
    this.used = 0;
    this.dropped = 0;
  }

  /** Send what is pending, then `then` (the run's done) in the same write: the host reads them at once. */
  flush(...then: Record<string, unknown>[]): void {
    if (this.timer !== null) realClearTimeout(this.timer);
    this.timer = null;
    const messages = this.pending.length ? [{ op: "output", data: this.pending.join("") }] : [];
    this.pending = [];
    this.pendingChars = 0;
    if (messages.length + then.length) send(...messages, ...then);
  }
}

const output = new Output(100_000);

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

class ToolError extends Error {
  server: string | null;
  tool: string | null;

  constructor(message: string, server: string | null = null, tool: string | null = null) {
    super(message);
    this.name = "ToolError";
    this.server = server;
    this.tool = tool;
  }
}

let nextId = 0;

/** The host's answer to call `id`: read synchronously, since the script waits for it anyway (the host
 * answers a run's calls one at a time, in order). A blocking read skips the thread-pool hop and the
 * event-loop turn of an async read: about a millisecond less per call. */
function resultOf(id: number): Record<string, unknown> {
  for (;;) {
    const message = receiveSync();
    if (message.op === "result" && message.id === id) return message;
  }
}

function callTool(server: string, tool: string, args: unknown = {}): Promise<unknown> {
  const failure = new ToolError("", server, tool);
  if (typeof server !== "string" || typeof tool !== "string") {
    return Promise.reject(new TypeError("callTool(server, tool, args): server and tool are names (strings)"));
  }
  if (args === undefined || args === null) args = {};
  if (typeof args !== "object" || Array.isArray(args)) {
    return Promise.reject(new TypeError(`the arguments of ${server}.${tool} must be an object, e.g. { path: "a.txt" }`));
  }
  let payload: Json;
  try {
    payload = parse(stringify(args));
  } catch (error) {
    return Promise.reject(new TypeError(`the arguments of ${server}.${tool} must be JSON values: ${error}`));
  }
  output.flush();
  const id = ++nextId;
  send({ op: "call", id, server, tool, arguments: payload });
  const message = resultOf(id);
  const error = message.error as { message?: string; server?: string; tool?: string } | undefined;
  if (error) {
    failure.message = error.message ?? "the tool failed";
    failure.server = error.server ?? null;
    failure.tool = error.tool ?? null;
    return Promise.reject(failure);
  }
  return Promise.resolve(message.value ?? null);
}

/** Define a property (never a setter call: a tool or server may be called `__proto__`). */
function define(target: object, name: string, value: unknown): void {
  Object.defineProperty(target, name, { value, enumerable: true, writable: true, configurable: true });
}

function defineTools(functions: Record<string, string[]>): void {
  for (const [namespace, names] of Object.entries(functions)) {
    const object = {};
    for (const name of names) {
      define(object, name, { [name]: (args?: unknown) => callTool(namespace, name, args) }[name]);
    }
    define(globalThis, namespace, Object.freeze(object));
  }
  define(globalThis, "callTool", callTool);
  define(globalThis, "ToolError", ToolError);
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
  const nodeRequire = createRequire(`file://${Deno.cwd()}/`);
  (globalThis as Record<string, unknown>).require = function require(name: string): unknown {
    const found = loaded.get(name);
    if (found) return interop(found);
    if (typeof name === "string" && isBuiltin(name)) return nodeRequire(name);
    throw new Error(
      `Cannot find module '${name}': require() loads Node.js built-ins and allowed npm packages named ` +
        "with a string literal, e.g. require('axios') (see list_allowed_packages)",
    );
  };
}

// ----- errors ---------------------------------------------------------------------------------------

const USER_FRAME = /data:application\/(?:typescript|javascript);base64,[A-Za-z0-9+/=.]*:(\d+):(\d+)/;

function cleanStack(stack: string): string {
  return stack
    .split("\n")
    .filter((line) => !line.includes(WORKER_URL) && !/\(?ext:|\(node:|at node:/.test(line))
    .map((line) => line.replace(new RegExp(USER_FRAME.source, "g"), "<script>:$1:$2"))
    .map((line) => line.replace(/file:\/\/\/\S*?\/npm\/[^/]+\//g, "npm:"))
    .join("\n");
}

function describe(error: unknown): ErrorJson {
  if (!(error instanceof Error)) {
    const shown = typeof error === "string" ? error : Deno.inspect(error);
    return { type: "Error", message: `uncaught ${shown}`, line: null, traceback: null };
  }
  let type = error.name || "Error";
  let message = String(error.message);
  const syntax = /^SyntaxError: (.*)/.exec(message);
  if (syntax) {
    // A parse error of the script: Deno reports it with a code frame and the location.
    const where = USER_FRAME.exec(message);
    type = "SyntaxError";
    const first = syntax[1].split("\n")[0];
    message = where ? `${first} (line ${where[1]}, column ${where[2]})` : first;
    const frame = cleanStack(String(error.message)).split("\n").slice(1).join("\n").trim();
    return { type, message, line: where ? Number(where[1]) : null, traceback: frame || null };
  }
  const stack = String(error.stack ?? "");
  const where = USER_FRAME.exec(stack);
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

function toJson(value: unknown): Json {
  if (value === undefined) return null;
  try {
    const text = stringify(value);
    return text === undefined ? Deno.inspect(value) : parse(text);
  } catch {
    return Deno.inspect(value);
  }
}

let phase: "waiting" | "running" | "evaluated" | "finished" = "waiting";
let returnValue: unknown = undefined;

function finish(success: boolean, error: ErrorJson | null = null): void {
  if (phase === "finished") return;
  phase = "finished";
  const value = success ? toJson(returnValue) : null; // a toJSON() may still print
  output.flush({ op: "done", success, returnValue: value, error, dropped: output.dropped, files: listFiles() });
}

function fail(error: unknown): never {
  finish(false, describe(error));
  realExit(0);
}

// The script's event loop is empty: it has finished, as a Node.js program would. (A script whose
// top-level await can never settle makes Deno exit with an error instead; the host reports that.)
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
  fail(event.reason);
});
addEventListener("error", (event) => {
  event.preventDefault();
  fail(event.error ?? new Error(event.message));
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
  output.cap = message.max_output;
  defineTools(message.functions);
  const loaded = new Map<string, Record<string, unknown>>();
  phase = "running";
  try {
    for (const { name, specifier } of message.packages) loaded.set(name, await import(specifier));
    defineRequire(loaded);
    const kind = message.language === "typescript" ? "typescript" : "javascript";
    const module = await import(`data:application/${kind};base64,${encodeBase64(message.code)}`);
    returnValue = await module.default;
  } catch (error) {
    fail(error);
  }
  phase = "evaluated";
}

async function main(): Promise<void> {
  // Everything that does not depend on the run is done before saying ready: capturing output,
  // hiding the environment, warming up the TypeScript transpiler and the module loader.
  captureOutput();
  // The first console.log loads and compiles node's formatting code: about 5 ms, paid here, not by the run.
  console.log("warm", 1, { a: [1.5, "b"] }, new Error("warm").message);
  output.reset();
  process.env = {};
  Deno.exit = exitWith;
  process.exit = exitWith as typeof process.exit;
  await import(`data:application/typescript;base64,${encodeBase64("export const warm: number = 1;")}`);
  send({ op: "ready" });
  for (;;) {
    const message = await receive();
    if (message.op === "run") {
      run(message as unknown as RunMessage);
      return;
    }
  }
}

main();
