/**
 * A real Brain server process for end-to-end tests: `test/fixtures/server.mjs` (the compiled
 * composition root plus test extensions) or the product itself (`node bin/brain.js serve`), on a
 * port the kernel picks (BRAIN_LISTEN=127.0.0.1:0) and a temporary data directory. The harness
 * waits for the `brain listening on http://HOST:PORT` log line, and can kill the process
 * (SIGKILL), stop it (SIGTERM, waiting for its exit) and start it again on the same directory.
 */
import { type ChildProcess, execSync, spawn } from "node:child_process"
import type * as http from "node:http"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll } from "@effect/vitest"
import { Agent } from "undici"
import { SERVER_NODE_FLAGS } from "../../src/cli/nodeFlags.js"

export const ROOT = fileURLToPath(new URL("../..", import.meta.url))
export const FIXTURE = path.join(ROOT, "test/fixtures/server.mjs")
export const BIN = path.join(ROOT, "bin/brain.js")

/**
 * Milliseconds a server may take to print its listening line: a hang guard, not a timing claim
 * (on a 2-core machine shared with other suites, at load 20, a start has taken past 15 s; at load
 * 30 it gets a fifteenth of a core). Below vitest's hookTimeout, so that a hook starting a server
 * fails with this deadline's message and the server's output.
 */
const START_DEADLINE_MS = 90_000
/**
 * Milliseconds a stopping server may take to exit before the harness gives up on it: a hang guard
 * too (a graceful stop drains and closes every journal, under the same load).
 */
const EXIT_DEADLINE_MS = 60_000

/** `npm test` builds first; a direct `vitest run` of one file builds only when dist is missing. */
export const ensureBuilt = () => {
  if (!fs.existsSync(path.join(ROOT, "dist/main.js")) || !fs.existsSync(path.join(ROOT, "dist/brain.mjs"))) {
    execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  }
}

export interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

export interface ServerOptions {
  /** `fixture` (default): test/fixtures/server.mjs; `product`: `node bin/brain.js serve`. */
  readonly entry?: "fixture" | "product"
  /** Extra environment (BRAIN_*). BRAIN_LISTEN defaults to 127.0.0.1:0, BRAIN_DATA_DIR to a temp dir. */
  readonly env?: Readonly<Record<string, string>>
  /** Extra CLI arguments (product only). */
  readonly args?: ReadonlyArray<string>
  /** An existing data directory to serve (kept on `dispose`). */
  readonly dataDir?: string
  /**
   * Node flags before the entry script (`--max-old-space-size=256`, say). Given, they replace the
   * flags the server ships with (SERVER_NODE_FLAGS, as `npm start` and bin/brain.js's first line
   * pass them), which a server spawned here runs with otherwise; `[]` runs it without any.
   */
  readonly nodeArgs?: ReadonlyArray<string>
  /** The process's open-file limit (soft and hard), set through `ulimit -n` before it starts. */
  readonly fileLimit?: number
}

export class ServerProcess {
  child!: ChildProcess
  baseUrl = ""
  /** Every stdout line and stderr text, for diagnostics. */
  readonly lines: Array<string> = []
  stderr = ""
  private exitedPromise!: Promise<Exited>
  exited: Exited | undefined
  readonly ownsDataDir: boolean
  readonly dataDir: string

  constructor(readonly options: ServerOptions = {}) {
    this.ownsDataDir = options.dataDir === undefined
    this.dataDir = options.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "brain-e2e-"))
  }

  /** Where the fixture logs every tool invocation (outside the data directory, so it survives kills). */
  get toolLog() {
    return `${this.dataDir}.tools.log`
  }

  /** The tool invocations the fixture logged, in order. */
  toolCalls(): Array<{ readonly tool: string; readonly session: string; readonly sequence: number }> {
    if (!fs.existsSync(this.toolLog)) return []
    return fs.readFileSync(this.toolLog, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l))
  }

  get lockFile() {
    return path.join(this.dataDir, "lock")
  }

  get pid() {
    return this.child.pid!
  }

  /** The whole output so far, for assertion messages. */
  get output() {
    return `stdout:\n${this.lines.join("\n")}\nstderr:\n${this.stderr}`
  }

  /** Spawns the process; resolves with its exit instead of throwing when it exits before listening. */
  spawn(): Promise<{ readonly listening: true } | { readonly listening: false; readonly exited: Exited }> {
    const entry = this.options.entry ?? "fixture"
    const argv = [...(this.options.nodeArgs ?? SERVER_NODE_FLAGS), ...(entry === "fixture" ? [FIXTURE] : [BIN, "serve", ...(this.options.args ?? [])])]
    this.lines.length = 0
    this.stderr = ""
    this.exited = undefined
    this.baseUrl = ""
    // With a file limit, a shell sets it and then becomes node (exec): the pid is still the server's.
    const [command, commandArgs] = this.options.fileLimit === undefined
      ? [process.execPath, argv]
      : ["/bin/sh", ["-c", `ulimit -n ${this.options.fileLimit} && exec "$0" "$@"`, process.execPath, ...argv]]
    const child = spawn(command, commandArgs, {
      cwd: ROOT,
      env: {
        ...process.env,
        BRAIN_LISTEN: "127.0.0.1:0",
        BRAIN_DATA_DIR: this.dataDir,
        BRAIN_TEST_TOOL_LOG: this.toolLog,
        ...this.options.env
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    this.child = child
    this.exitedPromise = new Promise((resolve) => {
      child.on("close", (code, signal) => {
        this.exited = { code, signal }
        resolve(this.exited)
      })
    })
    return new Promise((resolve, reject) => {
      let pending = ""
      const deadline = setTimeout(() => {
        child.kill("SIGKILL")
        reject(new Error(`the server did not print its listening line within ${START_DEADLINE_MS} ms\n${this.output}`))
      }, START_DEADLINE_MS)
      child.stdout!.setEncoding("utf8")
      child.stdout!.on("data", (chunk: string) => {
        pending += chunk
        const parts = pending.split("\n")
        pending = parts.pop()!
        for (const line of parts) {
          this.lines.push(line)
          if (this.baseUrl) continue
          let message = line
          try {
            message = String(JSON.parse(line).message ?? line)
          } catch {
            // not a JSON log line
          }
          const m = /brain listening on (http:\/\/[^\s]+)/.exec(message)
          if (m) {
            this.baseUrl = m[1]!
            clearTimeout(deadline)
            resolve({ listening: true })
          }
        }
      })
      child.stderr!.setEncoding("utf8")
      child.stderr!.on("data", (chunk: string) => void (this.stderr += chunk))
      child.on("error", (err) => {
        clearTimeout(deadline)
        reject(err)
      })
      void this.exitedPromise.then((exited) => {
        clearTimeout(deadline)
        if (!this.baseUrl) resolve({ listening: false, exited })
      })
    })
  }

  /** Spawns and requires it to listen. */
  async start(): Promise<this> {
    const r = await this.spawn()
    if (!r.listening) throw new Error(`the server exited before listening (${JSON.stringify(r.exited)})\n${this.output}`)
    return this
  }

  /** Resolves when the process has exited (at once if it has). */
  waitExit(deadlineMs = EXIT_DEADLINE_MS): Promise<Exited> {
    return Promise.race([
      this.exitedPromise,
      new Promise<Exited>((_, reject) =>
        setTimeout(() => reject(new Error(`the server did not exit within ${deadlineMs} ms\n${this.output}`)), deadlineMs).unref()
      )
    ])
  }

  signal(signal: NodeJS.Signals) {
    if (this.exited === undefined) this.child.kill(signal)
  }

  /** SIGKILL, and wait for the exit. */
  async kill(): Promise<Exited> {
    this.signal("SIGKILL")
    return this.waitExit()
  }

  /** SIGTERM (a graceful stop), and wait for the exit. */
  async stop(): Promise<Exited> {
    this.signal("SIGTERM")
    return this.waitExit()
  }

  /** Starts again on the same data directory (after a stop or a kill). */
  async restart(): Promise<this> {
    if (this.exited === undefined) await this.stop()
    return this.start()
  }

  /** Kills the process if it still runs and removes the data directory it created. */
  async dispose(): Promise<void> {
    if (this.child && this.exited === undefined) await this.kill().catch(() => undefined)
    if (this.ownsDataDir) fs.rmSync(this.dataDir, { recursive: true, force: true })
    fs.rmSync(this.toolLog, { force: true })
  }

  url(p: string) {
    return `${this.baseUrl}${p}`
  }
}

export const startServer = (options: ServerOptions = {}) => new ServerProcess(options).start()

/**
 * One real server for the tests of a describe block: the build checked and the server started
 * before them, disposed after. Call it at the block's top; read the server inside a test
 * (`server().baseUrl`), once the block has started.
 */
export const sharedServer = (options: ServerOptions = {}): (() => ServerProcess) => {
  let server: ServerProcess | undefined
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer(options)
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })
  return () => {
    if (server === undefined) throw new Error("the shared server is read before its block started")
    return server
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  /** The body parsed as JSON, or undefined when it is empty or not JSON. */
  readonly body: any
}

export interface RequestOptions {
  readonly method?: string
  /** A value to send as JSON (with content-type application/json), unless `raw` is given. */
  readonly json?: unknown
  /** A body sent as is. */
  readonly raw?: string | Uint8Array
  readonly headers?: Readonly<Record<string, string>>
  readonly signal?: AbortSignal
  /**
   * Milliseconds the answer may take to begin, and between its pieces, for a request the server
   * answers only when a long turn has ended (a sync send of thousands of Events, on a loaded
   * machine). Unset: fetch's own 300 s, which at load 30-40 such a send has passed.
   */
  readonly answerDeadlineMs?: number
}

/** One dispatcher per answer deadline asked for (connections are pooled per dispatcher). */
const patientDispatchers = new Map<number, Agent>()
const patientDispatcher = (ms: number) => {
  let agent = patientDispatchers.get(ms)
  if (agent === undefined) {
    agent = new Agent({ headersTimeout: ms, bodyTimeout: ms })
    patientDispatchers.set(ms, agent)
  }
  return agent
}

/**
 * An undici Agent as fetch's `dispatcher`. The global fetch's types name undici-types 6's
 * Dispatcher and the Agent is undici 7's: the same interface at run time, two versions to the compiler.
 */
const asDispatcher = (agent: Agent): NonNullable<RequestInit["dispatcher"]> => agent as unknown as NonNullable<RequestInit["dispatcher"]>

export const request = async (baseUrl: string, p: string, options: RequestOptions = {}): Promise<Reply> => {
  const headers: Record<string, string> = { ...options.headers }
  let body: string | Uint8Array | undefined = options.raw
  if (options.json !== undefined && body === undefined) {
    body = JSON.stringify(options.json)
    if (!Object.keys(headers).some((h) => h.toLowerCase() === "content-type")) headers["content-type"] = "application/json"
  }
  const res = await fetch(`${baseUrl}${p}`, {
    method: options.method ?? (body !== undefined ? "POST" : "GET"),
    headers,
    ...(body !== undefined ? { body } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.answerDeadlineMs !== undefined ? { dispatcher: asDispatcher(patientDispatcher(options.answerDeadlineMs)) } : {})
  })
  const text = await res.text()
  let parsed: unknown
  try {
    parsed = text.length > 0 ? JSON.parse(text) : undefined
  } catch {
    parsed = undefined
  }
  return { status: res.status, headers: res.headers, text, body: parsed }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Polls `probe` until it returns a value other than undefined, or fails after `deadlineMs`. */
export const eventually = async <A>(what: string, probe: () => Promise<A | undefined>, deadlineMs = 10_000, everyMs = 25): Promise<A> => {
  const until = Date.now() + deadlineMs
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await sleep(everyMs)
  }
}

/** The server's log messages so far (its JSON lines' `message`), in order. */
export const logMessages = (s: ServerProcess): Array<string> =>
  s.lines.flatMap((l) => {
    try {
      return [String((JSON.parse(l) as { readonly message: unknown }).message)]
    } catch {
      return []
    }
  })

/**
 * The connections the server says one of its listener's timers closed (its log, src/main.ts;
 * ClosedBy in src/http/Connections.ts): which timer, and the client's address. A client's own
 * connection is found by its local port (`peer` ends `:<port>`).
 */
export const closedConnections = (s: ServerProcess): Array<{ readonly by: string; readonly port: number }> =>
  s.lines.flatMap((l) => {
    try {
      const { annotations } = JSON.parse(l) as { readonly annotations?: { readonly closed_by?: string; readonly peer?: string } }
      if (annotations?.closed_by === undefined || annotations.peer === undefined) return []
      return [{ by: annotations.closed_by, port: Number(annotations.peer.slice(annotations.peer.lastIndexOf(":") + 1)) }]
    } catch {
      return []
    }
  })

/** Which timer, by the server's word (closedConnections), closed the connection whose client end is `port`; undefined while none has. */
export const closedBy = (s: ServerProcess, port: number): string | undefined =>
  closedConnections(s).find((c) => c.port === port)?.by

/** A plain node:http response's whole body, as text. */
export const responseText = (response: http.IncomingMessage): Promise<string> =>
  new Promise<string>((resolve) => {
    let t = ""
    response.setEncoding("utf8")
    response.on("data", (c: string) => (t += c))
    response.on("end", () => resolve(t))
  })
