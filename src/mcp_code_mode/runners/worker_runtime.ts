/**
 * What the two Deno-hosted workers share: the `deno` runner's (deno_worker.ts) and the `pyodide`
 * runner's (pyodide_worker.ts). Both speak the bridge protocol of mcp_code_mode/bridge/messages.py:
 * JSON lines, the host's on stdin, the worker's on stdout.
 *
 * - `LineReader`: the host's lines, read asynchronously while the worker waits for its run and
 *   synchronously once it runs (a tool call blocks until its answer is there);
 * - `MessageWriter`: whole lines to stdout, never interleaved;
 * - `Output`: printed text, capped and sent in `output` chunks as it is printed, also during
 *   synchronous work (a write flushes when the last flush is older than `FLUSH_MS`);
 * - `ToolChannel`: a tool call and the host's `result` line for it;
 * - `progressReport` / `ProgressReports`: a script's `report_progress`, checked, a few a second;
 * - `encodeValue` / `capJson`: a return value as JSON, cut to the output cap as cpython's is;
 * - `parseRunMessage`: the run message, checked field by field;
 * - `sendFiles` / `Shower`: the workspace's files and `show()`n images for the host, within the run
 *   message's `artifacts` caps (the host counts and checks everything again).
 *
 * Everything here is built from intrinsics captured when this module is evaluated, before any script
 * runs, so a script that rewrites `JSON` or `performance` does not change what these write.
 */

export const CHUNK_CHARS = 8192;
/** A write sends pending output when the last send is older than this (milliseconds). */
export const FLUSH_MS = 50;
export const MAX_FILES = 200;
/** Longest server or tool name a tool call may carry. */
export const MAX_NAME = 256;
export const DEFAULT_MAX_OUTPUT = 100_000;
/** A script's progress is sent at most this often (milliseconds; the host passes reports on at this pace). */
export const PROGRESS_MS = 100;
/** Characters of a progress message sent (the host refuses longer ones). */
export const MAX_PROGRESS_MESSAGE = 1000;
/** This module's URL (its frames are hidden from tracebacks, its file from the script). */
export const RUNTIME_URL = import.meta.url;

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type Message = Record<string, unknown>;

export interface ErrorJson {
  type: string;
  message: string;
  line: number | null;
  traceback: string | null;
}

const stringify = JSON.stringify;
const parse = JSON.parse;
const isArray = Array.isArray;
const now = performance.now.bind(performance);
const encoder = new TextEncoder();

/** A line as a message: a JSON object, else null (not a message). */
export function parseMessage(line: string): Message | null {
  try {
    const value = parse(line);
    return value !== null && typeof value === "object" && !isArray(value) ? value : null;
  } catch {
    return null;
  }
}

// ----- the host's lines ---------------------------------------------------------------------------

export class LineReader {
  private buffer = "";
  private scanned = 0; // no newline before this index of `buffer`
  private readonly decoder = new TextDecoder();
  private readonly chunk = new Uint8Array(1 << 16);

  /** `onEnd` is called when the host closes stdin (it has gone): it exits the process. */
  constructor(
    private readonly read: (p: Uint8Array) => Promise<number | null>,
    private readonly readSync: (p: Uint8Array) => number | null,
    private readonly onEnd: () => never,
  ) {}

  private take(): string | null {
    for (;;) {
      const index = this.buffer.indexOf("\n", this.scanned);
      if (index < 0) {
        this.scanned = this.buffer.length;
        return null;
      }
      const line = this.buffer.slice(0, index);
      this.buffer = this.buffer.slice(index + 1);
      this.scanned = 0;
      if (line.trim()) return line;
    }
  }

  private add(count: number | null): void {
    if (count === null) this.onEnd();
    this.buffer += this.decoder.decode(this.chunk.subarray(0, count!), { stream: true });
  }

  /** The next non-empty line, waiting in the event loop (before the run). */
  async next(): Promise<string> {
    for (;;) {
      const line = this.take();
      if (line !== null) return line;
      this.add(await this.read(this.chunk));
    }
  }

  /** The same, blocking: once the run has started, only tool calls read, and only this way. */
  nextSync(): string {
    for (;;) {
      const line = this.take();
      if (line !== null) return line;
      this.add(this.readSync(this.chunk));
    }
  }
}

// ----- the worker's lines ---------------------------------------------------------------------------

export class MessageWriter {
  /** `write` is a synchronous write to the channel (stdout), captured before any script runs. */
  constructor(private readonly write: (p: Uint8Array) => number) {}

  /** One line, written whole before this returns. */
  line(text: string): void {
    let data = encoder.encode(text + "\n");
    while (data.length > 0) data = data.subarray(this.write(data));
  }

  /** Messages in one write: the host reads them at once. */
  send(...messages: Message[]): void {
    if (messages.length > 0) this.line(messages.map((m) => stringify(m)).join("\n"));
  }
}

// ----- printed output -------------------------------------------------------------------------------

/** A timer that runs after the script's synchronous work, and does not keep the event loop alive. */
export interface Timers {
  set(callback: () => void, ms: number): unknown;
  clear(id: unknown): void;
}

export class Output {
  cap = DEFAULT_MAX_OUTPUT;
  used = 0;
  dropped = 0;
  private pending: string[] = [];
  private pendingChars = 0;
  private lastFlush = -Infinity;
  private timer: unknown = null;

  /** With `timers`, output still pending when the script goes idle is sent `FLUSH_MS` later. */
  constructor(private readonly writer: MessageWriter, private readonly timers: Timers | null = null) {}

  /** Keep up to `cap` characters; send them when a chunk is full, or the last send is `FLUSH_MS` old
   * (so the first print of a run goes out at once, even if the script then computes for seconds). */
  write(text: string): void {
    const room = Math.max(this.cap - this.used, 0);
    if (text.length > room) {
      this.dropped += text.length - room;
      text = text.slice(0, room);
    }
    if (!text) return;
    this.used += text.length;
    this.pending.push(text);
    this.pendingChars += text.length;
    if (this.pendingChars >= CHUNK_CHARS || now() - this.lastFlush >= FLUSH_MS) this.flush();
    else if (this.timer === null && this.timers !== null) {
      this.timer = this.timers.set(() => this.flush(), FLUSH_MS);
    }
  }

  /** Forget what was written (the warm-up's), as if nothing had been; the next write is sent at once. */
  reset(cap: number = this.cap): void {
    this.cancelTimer();
    this.pending = [];
    this.pendingChars = 0;
    this.used = 0;
    this.dropped = 0;
    this.cap = cap;
    this.lastFlush = -Infinity;
  }

  /** Send what is pending, then `then` (the run's done) in the same write. */
  flush(...then: Message[]): void {
    this.cancelTimer();
    const messages = this.pending.length > 0 ? [{ op: "output", data: this.pending.join("") }] : [];
    this.pending = [];
    this.pendingChars = 0;
    this.writer.send(...messages, ...then);
    this.lastFlush = now();
  }

  private cancelTimer(): void {
    if (this.timer !== null && this.timers !== null) this.timers.clear(this.timer);
    this.timer = null;
  }
}

// ----- progress -------------------------------------------------------------------------------------

/** The `progress` message of `report_progress(done, total, message)`, or what is wrong with its figures. */
export function progressReport(done: unknown, total: unknown, message: unknown): Message | string {
  if (typeof done !== "number" || !Number.isFinite(done)) return "done must be a finite number";
  if (total !== undefined && total !== null && (typeof total !== "number" || !Number.isFinite(total))) {
    return "total must be a finite number (or null)";
  }
  let text: string | null = null;
  if (message !== undefined && message !== null) {
    try {
      text = String(message).slice(0, MAX_PROGRESS_MESSAGE);
    } catch {
      return "message must be a string";
    }
  }
  return { op: "progress", done, total: total ?? null, message: text };
}

/** A script's reports: sent at once when the last went `PROGRESS_MS` ago, else kept (the newest wins) until
 * the next report past the interval, a timer once the script is idle, or `flush` (before the run's done). */
export class ProgressReports {
  private last = -Infinity;
  private pending: Message | null = null;
  private timer: unknown = null;

  constructor(
    private readonly writer: MessageWriter,
    private readonly output: Output,
    private readonly timers: Timers | null = null,
  ) {}

  report(message: Message): void {
    this.pending = message;
    if (now() - this.last >= PROGRESS_MS) this.flush();
    else if (this.timer === null && this.timers !== null) {
      this.timer = this.timers.set(() => {
        this.timer = null;
        this.flush();
      }, PROGRESS_MS);
    }
  }

  flush(): void {
    if (this.timer !== null && this.timers !== null) this.timers.clear(this.timer);
    this.timer = null;
    if (this.pending === null) return;
    const message = this.pending;
    this.pending = null;
    this.output.flush(message); // what was printed before it, then the report
    this.last = now();
  }
}

// ----- tool calls -----------------------------------------------------------------------------------

export class ToolError extends Error {
  server: string | null;
  tool: string | null;

  constructor(message: string, server: string | null = null, tool: string | null = null) {
    super(message);
    this.name = "ToolError";
    this.server = server;
    this.tool = tool;
  }
}

/** Why a call's server and tool names are refused, or null. */
export function badNames(server: unknown, tool: unknown): string | null {
  if (typeof server !== "string" || typeof tool !== "string") return "server and tool are names (strings)";
  if (server.length > MAX_NAME || tool.length > MAX_NAME) return "server or tool name too long";
  return null;
}

export function isJsonObject(value: unknown): value is { [key: string]: Json } {
  return value !== null && typeof value === "object" && !isArray(value);
}

export class ToolChannel {
  private nextId = 0;
  private readonly waiting = new Map<number, (line: string) => void>();
  private reading = false;
  private readonly unanswered = new Set<number>();

  constructor(private readonly writer: MessageWriter, private readonly reader: LineReader, private readonly output: Output) {}

  /** Calls sent by `request` whose answer has not come yet. */
  get pending(): number {
    return this.waiting.size;
  }

  /** Send a call now and wait, in the event loop, for its `result` line (unparsed). Calls made together
   * (`Promise.all`) are all sent at once; the host answers several at a time, each with its id, in the
   * order they finish, and one reader hands each line to its caller. */
  request(server: string, tool: string, args: { [key: string]: Json }, line?: number): Promise<string> {
    this.output.flush();
    const id = ++this.nextId;
    const at = line ? `,"line":${line}` : "";
    this.writer.line(
      `{"op":"call","id":${id},"server":${stringify(server)},"tool":${stringify(tool)},"arguments":${stringify(args)}${at}}`,
    );
    const answered = new Promise<string>((resolve) => this.waiting.set(id, resolve));
    void this.readAnswers();
    return answered;
  }

  private async readAnswers(): Promise<void> {
    if (this.reading) return;
    this.reading = true;
    try {
      while (this.waiting.size > 0) {
        const line = await this.reader.next();
        const id = resultId(line);
        const resolve = id === null ? undefined : this.waiting.get(id);
        if (resolve !== undefined) {
          this.waiting.delete(id!);
          resolve(line);
        }
      }
    } finally {
      this.reading = false;
    }
  }

  /** Send a call now and return its id without waiting (Pyodide's prelude, which matches answers to
   * its callers itself: a blocking stub call says `wait`, a `parallel` or awaited one does not). */
  send(server: string, tool: string, args: { [key: string]: Json }, line?: number, wait = false): number {
    this.output.flush();
    const id = ++this.nextId;
    const at = line ? `,"line":${line}` : "";
    const hint = wait ? `,"wait":true` : "";
    this.writer.line(
      `{"op":"call","id":${id},"server":${stringify(server)},"tool":${stringify(tool)},"arguments":${stringify(args)}${at}${hint}}`,
    );
    this.unanswered.add(id);
    return id;
  }

  /** Block until the host answers one of the calls `send` made and this has not returned yet: that
   * `result` line, unparsed (whichever call it answers); lines that answer none of them are skipped.
   * Null when every such call is answered already (nothing would come). */
  receiveSync(): string | null {
    if (this.unanswered.size === 0) return null;
    for (;;) {
      const line = this.reader.nextSync();
      const id = resultId(line);
      if (id !== null && this.unanswered.delete(id)) return line;
    }
  }

  /** Send a call and block until the host answers it; its `result` line, unparsed (a caller that cannot
   * wait in the event loop: Pyodide's synchronous stubs). The host writes the answer compactly, `op` and
   * `id` first (`bridge.encode`): a line that starts that way is taken as it is, so a large result is
   * parsed once, by whoever reads it, not twice. */
  requestSync(server: string, tool: string, args: { [key: string]: Json }, line?: number): string {
    this.output.flush();
    const id = ++this.nextId;
    const answer = `{"op":"result","id":${id},`;
    const at = line ? `,"line":${line}` : "";
    this.writer.line(
      `{"op":"call","id":${id},"server":${stringify(server)},"tool":${stringify(tool)},"arguments":${stringify(args)}${at}}`,
    );
    for (;;) {
      const line = this.reader.nextSync();
      if (line.startsWith(answer)) return line;
      const message = parseMessage(line);
      if (message?.op === "result" && message.id === id) return line;
    }
  }
}

/** The id of a `result` line, or null for any other line. */
function resultId(line: string): number | null {
  const fast = /^\{"op":"result","id":(\d+),/.exec(line);
  if (fast) return Number(fast[1]);
  const message = parseMessage(line);
  return message?.op === "result" && typeof message.id === "number" ? message.id : null;
}

// ----- return values --------------------------------------------------------------------------------

/** A value already in JSON terms (a sandbox's report of it), within the cap: a string of at most
 * `cap` characters (what a cut value is, so a value cut once is not cut again), or another value whose
 * JSON text has at most `cap` characters; else the first `cap` characters of that text, and `cut`. */
export function capJson(value: Json, cap: number): { value: Json; cut: boolean } {
  if (value === null || typeof value === "boolean" || typeof value === "number") return { value, cut: false };
  if (typeof value === "string" && value.length <= cap) return { value, cut: false };
  const text = stringify(value);
  return text.length <= cap ? { value, cut: false } : { value: text.slice(0, cap), cut: true };
}

/** A script's value as JSON (else as `inspect` shows it), cut to `cap` characters of JSON text. */
export function encodeValue(value: unknown, cap: number, inspect: (v: unknown) => string): { value: Json; cut: boolean } {
  if (value === undefined) return { value: null, cut: false };
  let text: string | undefined;
  try {
    text = stringify(value);
  } catch {
    text = undefined;
  }
  if (text === undefined) {
    let shown: string;
    try {
      shown = String(inspect(value));
    } catch {
      shown = "<a value that cannot be shown>";
    }
    return shown.length <= cap ? { value: shown, cut: false } : { value: shown.slice(0, cap), cut: true };
  }
  return text.length <= cap ? { value: parse(text), cut: false } : { value: text.slice(0, cap), cut: true };
}

// ----- the run message ------------------------------------------------------------------------------

/** The run message's `artifacts`: what the host keeps (null: it keeps no files, none are sent). */
export interface FileCaps {
  max_file: number;
  max_run: number;
  max_files: number;
  max_image: number;
  max_shown: number;
}

export interface RunMessage {
  op: "run";
  code: string;
  language: string;
  max_output: number;
  allow_network: boolean;
  /** namespace → its function names */
  functions: Record<string, string[]>;
  /** namespace → why its server is not available (configured, but down) */
  unavailable: Record<string, string>;
  packages: { name: string; specifier: string }[];
  pyodide_packages: string[];
  /** a session's run: the worker keeps its interpreter after `done` and waits for the next run */
  session: boolean;
  /** the run's number in its session, echoed in its `done` (null outside a session) */
  run: number | null;
  /** the skills the run may call: each a module's source (its default export), or the host's refusal */
  skills: SkillSpec[];
  artifacts: FileCaps | null;
}

/** A saved skill as a run message carries it (`skills.SkillBook.run_specs` on the host). */
export interface SkillSpec {
  name: string;
  schema: { [key: string]: Json };
  source: string | null;
  language: string;
  refused: string | null;
}

function skillSpec(value: unknown, where: string): SkillSpec {
  if (!isJsonObject(value) || typeof value.name !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(value.name)) {
    throw new TypeError(`${where}: not a skill with an identifier for a name`);
  }
  const schema = value.schema ?? {};
  if (!isJsonObject(schema)) throw new TypeError(`${where}: schema is not an object`);
  const source = value.source ?? null;
  const refused = value.refused ?? null;
  if (source !== null && typeof source !== "string") throw new TypeError(`${where}: source is not a string`);
  if (refused !== null && typeof refused !== "string") throw new TypeError(`${where}: refused is not a string`);
  const language = value.language === "typescript" ? "typescript" : "javascript";
  return { name: value.name, schema, source, language, refused };
}

function stringList(value: unknown, field: string): string[] {
  if (!isArray(value) || !value.every((v) => typeof v === "string")) throw new TypeError(`${field}: not a list of strings`);
  return value;
}

function record<T>(value: unknown, field: string, item: (v: unknown, where: string) => T): Record<string, T> {
  if (value === undefined || value === null) return {};
  if (!isJsonObject(value)) throw new TypeError(`${field}: not an object`);
  const out: Record<string, T> = Object.create(null);
  for (const [key, v] of Object.entries(value)) out[key] = item(v, `${field}.${key}`);
  return out;
}

/** The run message's fields, each checked (a `TypeError` names the first that is wrong); optional
 * fields get their defaults. */
export function parseRunMessage(message: Message): RunMessage {
  if (message.op !== "run") throw new TypeError("not a run message");
  const code = message.code ?? "";
  if (typeof code !== "string") throw new TypeError("code: not a string");
  const language = message.language ?? "javascript";
  if (typeof language !== "string") throw new TypeError("language: not a string");
  const maxOutput = message.max_output ?? DEFAULT_MAX_OUTPUT;
  if (typeof maxOutput !== "number" || !Number.isSafeInteger(maxOutput) || maxOutput < 0) {
    throw new TypeError("max_output: not a count of characters");
  }
  const allowNetwork = message.allow_network ?? false;
  if (typeof allowNetwork !== "boolean") throw new TypeError("allow_network: not a boolean");
  const functions = record(message.functions, "functions", stringList);
  const unavailable = record(message.unavailable, "unavailable", (v, where) => {
    if (typeof v !== "string") throw new TypeError(`${where}: not a string`);
    return v;
  });
  const packages = message.packages ?? [];
  if (
    !isArray(packages) ||
    !packages.every((p) => isJsonObject(p) && typeof p.name === "string" && typeof p.specifier === "string")
  ) {
    throw new TypeError("packages: not a list of {name, specifier}");
  }
  const pyodidePackages = stringList(message.pyodide_packages ?? [], "pyodide_packages");
  const session = message.session ?? false;
  if (typeof session !== "boolean") throw new TypeError("session: not a boolean");
  const run = message.run ?? null;
  if (run !== null && (typeof run !== "number" || !Number.isSafeInteger(run))) throw new TypeError("run: not an integer");
  const skills = message.skills ?? [];
  if (!isArray(skills)) throw new TypeError("skills: not a list");
  const artifacts = fileCaps(message.artifacts);
  return {
    op: "run",
    code,
    language,
    max_output: maxOutput,
    allow_network: allowNetwork,
    functions,
    unavailable,
    packages: packages as { name: string; specifier: string }[],
    pyodide_packages: pyodidePackages,
    session,
    run,
    skills: skills.map((s, i) => skillSpec(s, `skills[${i}]`)),
    artifacts,
  };
}

function fileCaps(value: unknown): FileCaps | null {
  if (value === undefined || value === null) return null;
  if (!isJsonObject(value)) throw new TypeError("artifacts: not an object");
  const count = (key: string): number => {
    const v = value[key] ?? 0;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw new TypeError(`artifacts.${key}: not a count`);
    return v;
  };
  return {
    max_file: count("max_file"),
    max_run: count("max_run"),
    max_files: count("max_files"),
    max_image: count("max_image"),
    max_shown: count("max_shown"),
  };
}

// ----- files and images for the host ------------------------------------------------------------------

/** Bytes of a workspace file per `file` message. */
export const FILE_CHUNK = 256 * 1024;
const btoaReal = globalThis.btoa;
const atobReal = globalThis.atob;
const fromCharCode = String.fromCharCode;

export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoaReal(binary);
}

export function fromBase64(text: string): Uint8Array | null {
  try {
    const binary = atobReal(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return null;
  }
}

/** The image type of `bytes` by their first bytes (png, jpeg, gif, webp), else null. */
export function imageType(b: Uint8Array): string | null {
  const starts = (...xs: number[]): boolean => xs.every((x, i) => b[i] === x);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return "image/png";
  if (starts(0xff, 0xd8, 0xff)) return "image/jpeg";
  if (starts(0x47, 0x49, 0x46, 0x38) && (b[4] === 0x37 || b[4] === 0x39) && b[5] === 0x61) return "image/gif";
  if (starts(0x52, 0x49, 0x46, 0x46) && b[8] === 0x57 && b[9] === 0x45 && b[10] === 0x42 && b[11] === 0x50) {
    return "image/webp";
  }
  return null;
}

/** How the workers read the workspace (Deno's functions, captured before any script runs). */
export interface WorkspaceFiles {
  lstat(path: string): { isFile: boolean; isSymlink: boolean; size: number };
  open(path: string): { readSync(p: Uint8Array): number | null; close(): void };
}

/** A plain relative path (no `..`, not absolute, no control characters). */
export function plainPath(path: unknown): path is string {
  if (typeof path !== "string" || path.length === 0 || path.length > 4096 || path.startsWith("/")) return false;
  for (let i = 0; i < path.length; i++) if (path.charCodeAt(i) < 32) return false;
  return !path.split("/").includes("..");
}

/** Send each listed file's bytes (`file` messages, in chunks) that the caps say the host keeps; nothing that
 * is not a regular file (a symlink is not followed), and nothing without caps. */
export function sendFiles(
  listed: unknown,
  caps: FileCaps | null,
  fs: WorkspaceFiles,
  send: (message: Message) => void,
): void {
  if (caps === null || !isArray(listed)) return;
  let total = 0;
  let count = 0;
  for (const entry of listed) {
    if (!isJsonObject(entry) || !plainPath(entry.path) || typeof entry.size !== "number") continue;
    const path = entry.path;
    if (count >= caps.max_files || entry.size > caps.max_file || total + entry.size > caps.max_run) continue;
    try {
      const info = fs.lstat(path);
      if (!info.isFile || info.isSymlink) continue;
      const file = fs.open(path);
      try {
        let sent = 0;
        let chunk = readChunk(file);
        for (;;) {
          const following = chunk.length > 0 ? readChunk(file) : new Uint8Array(0);
          sent += chunk.length;
          if (sent > caps.max_file) break; // it grew past the cap: the host drops what it has of it
          const end = following.length === 0;
          send({ op: "file", path, data: toBase64(chunk), end });
          if (end) {
            total += sent;
            count += 1;
            break;
          }
          chunk = following;
        }
      } finally {
        file.close();
      }
    } catch {
      continue;
    }
  }
}

function readChunk(file: { readSync(p: Uint8Array): number | null }, size = FILE_CHUNK): Uint8Array {
  const buffer = new Uint8Array(size);
  let filled = 0;
  while (filled < size) {
    const n = file.readSync(buffer.subarray(filled));
    if (n === null || n === 0) break;
    filled += n;
  }
  return buffer.subarray(0, filled);
}

export const IMAGE_USAGE = "show() takes an image: the path of a png, jpeg, gif or webp file in the workspace, " +
  "or an image value { type: 'image', data: <base64>, mimeType } as a tool returns it (or a list of them)";

/** `show(image)`: an image for the result's content, within the caps (the host checks it again). */
export class Shower {
  private shown = 0;
  constructor(
    private readonly caps: FileCaps | null,
    private readonly fs: WorkspaceFiles,
    private readonly send: (message: Message) => void,
  ) {}

  show(image: unknown): void {
    if (isArray(image)) {
      const images = image.filter((i) => isJsonObject(i) && i.type === "image");
      if (images.length === 0) throw new TypeError(IMAGE_USAGE);
      for (const item of images) this.show(item);
      return;
    }
    let data: Uint8Array | null;
    let what: string;
    if (isJsonObject(image)) {
      if (image.type !== "image" || typeof image.data !== "string") throw new TypeError(IMAGE_USAGE);
      data = fromBase64(image.data);
      if (data === null) throw new TypeError("show(): the image's data is not base64");
      what = "the image value";
    } else if (typeof image === "string") {
      what = image;
      const path = image.startsWith("./") ? image.slice(2) : image;
      if (!plainPath(path)) throw new TypeError(`show(): ${quote(image)} is not a file of the workspace`);
      const info = this.fs.lstat(path);
      if (!info.isFile || info.isSymlink) throw new TypeError(`show(): ${quote(image)} is not a regular file`);
      const file = this.fs.open(path);
      try {
        data = readChunk(file, (this.caps?.max_image ?? 0) + 1);
      } finally {
        file.close();
      }
    } else {
      throw new TypeError(IMAGE_USAGE);
    }
    const kind = imageType(data);
    if (kind === null) throw new TypeError(`show(): ${what} is not a png, jpeg, gif or webp image`);
    const limit = this.caps?.max_image ?? 0;
    if (data.length > limit) {
      throw new RangeError(`show(): ${what} is over the ${limit} bytes a shown image may have (CODE_MODE_ARTIFACT_INLINE_IMAGE_KB)`);
    }
    if (this.shown >= (this.caps?.max_shown ?? 0)) {
      throw new RangeError(`show(): a run may show at most ${this.caps?.max_shown ?? 0} images`);
    }
    this.shown += 1;
    this.send({ op: "image", data: toBase64(data), mimeType: kind });
  }
}

function quote(text: string): string {
  return stringify(text);
}
