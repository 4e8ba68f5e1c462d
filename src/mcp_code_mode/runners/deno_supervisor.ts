/**
 * The supervisor of the `deno` runner's isolate mode (`CODE_MODE_DENO_ISOLATES`): one process that serves run
 * after run of one owner, each run in a V8 isolate of its own (a web `Worker` running deno_worker.ts), and never
 * runs user code itself.
 *
 * The host (runners/deno.py) starts it in the sandbox as it starts a worker, behind `cm_launch.py
 * --control-fds`: its control channel is fd 3 (host → supervisor) and fd 4 (supervisor → host), opened as
 * `/proc/self/fd/3` and `/proc/self/fd/4`, which only this program may open (a run's Worker gets `NotCapable`,
 * and fds 3 and 4 are not in its resource table). Its fds 0 and 1 are /dev/null and stderr: a run can write on
 * fd 1 (`node:fs` `writeSync(1)`), and what it writes there never reaches the control channel.
 *
 *   supervisor → host   {"op": "ready"}; during a run, the run's own messages (call, output, progress, file,
 *                       image, done), each parsed and written again here; after the run's done,
 *                       {"op": "exit", "status": ..., "worker": name, "spares": n} and {"op": "ready"}
 *   host → supervisor   {"op": "run", ...} (the worker's run message), {"op": "result", ...} (forwarded),
 *                       {"op": "checked"} (after a run's end: the host found no isolate thread but the spares)
 *
 * A run's Worker gets read of the workspace and of its own program's two files, write of the workspace, the
 * network when the supervisor has it (the Worker revokes it before a run without the network), and nothing else
 * (no environment: the proxy variables go in the run message). The next runs' Workers are started between
 * runs (`SPARES` of them). After a run's done its Worker is terminated, the workspace is emptied and the cwd put back; the host then
 * checks that the Worker's thread is gone before it hands the supervisor another run (a Worker in a loop of
 * synchronous ops outlives `terminate()`). Anything the supervisor cannot parse as a run's message ends the run:
 * it writes a message the bridge refuses, and the host kills it.
 */

const WORKSPACE = Deno.cwd();
const PROGRAM = new URL("./deno_worker.ts", import.meta.url);
const RUNTIME = new URL("./worker_runtime.ts", import.meta.url);
const RUN_OPS = new Set(["call", "output", "progress", "file", "image", "done"]);
const PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"];
const TICKS_MS = [1, 1, 2, 4, 8, 16];
const SPARES = 2;

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const control = Deno.openSync("/proc/self/fd/3", { read: true });
const reply = Deno.openSync("/proc/self/fd/4", { write: true });

function write(text: string): void {
  let data = encoder.encode(text + "\n");
  while (data.length > 0) data = data.subarray(reply.writeSync(data));
}

function proxyValues(): Record<string, string> {
  const values: Record<string, string> = {};
  for (const name of PROXY_VARIABLES) {
    if (Deno.permissions.querySync({ name: "env", variable: name }).state !== "granted") continue;
    const value = Deno.env.get(name);
    if (value) values[name] = value;
  }
  return values;
}
const PROXY = proxyValues();

let created = 0;

interface Isolate {
  worker: Worker;
  name: string;
  ready: Promise<void>;
}

/** A Worker for the next run, started now: it says ready (an object) once it has warmed up. */
function startIsolate(): Isolate {
  const name = `run-${++created}`;
  const worker = new Worker(PROGRAM, {
    type: "module",
    name,
    deno: {
      permissions: {
        read: [WORKSPACE, decodeURIComponent(PROGRAM.pathname), decodeURIComponent(RUNTIME.pathname)],
        write: [WORKSPACE],
        net: "inherit",
        env: false,
        run: false,
        ffi: false,
        sys: false,
        import: false,
      },
    },
  } as WorkerOptions);
  let resolve!: () => void;
  const ready = new Promise<void>((r) => (resolve = r));
  const isolate: Isolate = { worker, name, ready };
  worker.onmessage = (event) => {
    if (current === isolate) relay(event.data);
    else if (!isolateReady.has(isolate) && isJsonObject(event.data) && event.data.op === "ready") {
      isolateReady.add(isolate);
      resolve();
    }
  };
  worker.onerror = (event) => {
    event.preventDefault(); // else it ends this process
    if (current === isolate) failRun(`the run's isolate failed: ${event.message}`);
  };
  worker.onmessageerror = () => {
    if (current === isolate) refuse("a message of the run could not be read");
  };
  return isolate;
}

const isolateReady = new WeakSet<Isolate>();
/** Isolates warming up for the next runs, oldest first. `new Worker()` holds this thread for 10-15 ms, so they
 * are started between runs, one per turn of the event loop, never while a run waits for its message, and only
 * once the host has counted the isolate threads after a run's end (its `checked`): the `exit` message says how
 * many spares there are, and the host expects that many threads and no more. */
const spares: Isolate[] = [startIsolate()];
/** Counts the runs' ends: a refill that was due before the last end starts nothing. */
let generation = 0;

function refill(due = generation): void {
  if (due !== generation || spares.length >= SPARES) return;
  setTimeout(() => {
    if (due !== generation || busy) return; // a run started or ended meanwhile: refilled after its check
    spares.push(startIsolate());
    refill(due);
  }, 0);
}
let current: Isolate | null = null;
let finished = false;
let tick: ReturnType<typeof setTimeout> | null = null;
/** From a run message until the run's end is reported. */
let busy = false;

function isJsonObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** The run's lines (bytes from its Worker): each parsed, checked and written again; the first done ends it. */
function relay(data: unknown): void {
  if (finished) return;
  if (isJsonObject(data) && data.op === "evaluated") {
    // The script's module has evaluated: look for the run's end now, not at the next tick (any run may ask).
    current?.worker.postMessage({ op: "tick" });
    return;
  }
  if (!(data instanceof Uint8Array)) return refuse("the run sent something other than message lines");
  for (const line of decoder.decode(data).split("\n")) {
    if (!line.trim()) continue;
    let message: unknown;
    try {
      message = JSON.parse(line);
    } catch {
      return refuse("the run sent a line that is not JSON");
    }
    if (!isJsonObject(message) || typeof message.op !== "string" || !RUN_OPS.has(message.op)) {
      return refuse("the run sent a message that is not a run's");
    }
    write(JSON.stringify(message));
    if (message.op === "done") return endRun("exit code 0");
  }
}

/** End the run with a message the bridge refuses (the host then kills this process). */
function refuse(why: string): void {
  if (finished) return;
  write(JSON.stringify({ op: "refused", reason: why }));
  endRun(why);
}

function failRun(message: string): void {
  if (finished) return;
  write(JSON.stringify({ op: "done", success: false, returnValue: null, error: { type: "Error", message, line: null, traceback: null }, dropped: 0, files: [] }));
  endRun("the isolate failed");
}

function endRun(status: string): void {
  finished = true;
  if (tick !== null) clearTimeout(tick);
  tick = null;
  const ended = current!;
  current = null;
  ended.worker.terminate();
  try {
    Deno.chdir(WORKSPACE);
    for (const entry of Deno.readDirSync(WORKSPACE)) Deno.removeSync(`${WORKSPACE}/${entry.name}`, { recursive: true });
  } catch (error) {
    status = `the workspace could not be emptied: ${error}`;
  }
  busy = false;
  generation++;
  write(JSON.stringify({ op: "exit", status, worker: ended.name, spares: spares.length }));
  write(JSON.stringify({ op: "ready" }));
}

/** Ticks while the run runs: in each, the Worker checks whether its event loop has anything left to do. */
function ticks(isolate: Isolate, step = 0): void {
  tick = setTimeout(() => {
    if (current !== isolate || finished) return;
    isolate.worker.postMessage({ op: "tick" });
    ticks(isolate, Math.min(step + 1, TICKS_MS.length - 1));
  }, TICKS_MS[step]);
}

async function startRun(message: Record<string, unknown>): Promise<void> {
  const isolate = spares.shift() ?? startIsolate();
  await isolate.ready;
  current = isolate;
  finished = false;
  isolate.worker.postMessage({ ...message, proxy: PROXY });
  ticks(isolate);
}

// ----- the control channel -------------------------------------------------------------------------------

async function serve(): Promise<void> {
  while (spares.length < SPARES) spares.push(startIsolate());
  await spares[0].ready;
  write(JSON.stringify({ op: "ready" }));
  const chunk = new Uint8Array(1 << 16);
  const stream = new TextDecoder();
  let buffer = "";
  let starting: Promise<void> = Promise.resolve();
  for (;;) {
    const count = await control.read(chunk);
    if (count === null) Deno.exit(0); // the host has gone
    buffer += stream.decode(chunk.subarray(0, count), { stream: true });
    let index: number;
    while ((index = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, index);
      buffer = buffer.slice(index + 1);
      // The host writes `op` first (bridge.encode): an answer is told by its start, and forwarded unparsed.
      let message: unknown = null;
      if (!line.startsWith('{"op":"result"')) {
        try {
          message = JSON.parse(line);
        } catch {
          continue;
        }
        if (!isJsonObject(message) || message.op !== "result") {
          if (isJsonObject(message) && message.op === "checked" && !busy) refill();
          if (isJsonObject(message) && message.op === "run" && current === null && !busy) {
            busy = true;
            starting = startRun(message);
          }
          continue;
        }
      }
      await starting;
      if (current !== null && !finished) current.worker.postMessage(line); // else a late answer to a run that is over
    }
  }
}

serve();
