/**
 * The fake http Environment (test/fixtures/httpEnvironment.mjs) as a scoped resource: a real
 * process on loopback whose request log a test reads to count what Brain sent.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as readline from "node:readline"
import { Duration, Effect, Either } from "effect"
import { type EnvironmentBindings, parseEnvironmentBindings } from "../../src/domain/Environment.js"

export const FAKE_ENVIRONMENT = new URL("../fixtures/httpEnvironment.mjs", import.meta.url).pathname

export interface LogLine {
  readonly path: string
  readonly event?: "closed"
  readonly session_id: string
  readonly sequence: number
  readonly environment?: string
  readonly name?: string
  readonly reason?: string
  readonly count?: number
  readonly auth?: boolean
  readonly protocol?: string | null
  /** The request body's member names, sorted. */
  readonly fields?: ReadonlyArray<string>
}

export interface Fake {
  readonly url: string
  /** Every line the fake has logged so far. */
  readonly log: () => ReadonlyArray<LogLine>
  /** The requests it received (not its `closed` events). */
  readonly requests: () => ReadonlyArray<LogLine>
}

/** Starts the fake with `env` for the scope; stops it (waiting for its exit) after. */
export const fakeEnvironment = (env: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-fakeenv-")), "requests.jsonl")
      const child = spawn(process.execPath, [FAKE_ENVIRONMENT], { env: { ...process.env, HTTP_ENV_LOG: file, ...env }, stdio: ["ignore", "pipe", "inherit"] })
      const first = await new Promise<string>((resolve) => readline.createInterface({ input: child.stdout! }).once("line", resolve))
      const log = () =>
        fs.existsSync(file) ? fs.readFileSync(file, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as LogLine) : []
      const self: Fake = { url: `http://127.0.0.1:${JSON.parse(first).port}`, log, requests: () => log().filter((l) => l.event === undefined) }
      return { self, child }
    }),
    ({ child }) => Effect.promise(() => new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : (child.once("exit", () => resolve()), child.kill()))))
  ).pipe(Effect.map(({ self }) => self))

/** Waits until the fake has logged a line matching `p` (bounded by the test's timeout). */
export const logged = (f: Fake, p: (l: LogLine) => boolean) =>
  Effect.gen(function*() {
    while (!f.log().some(p)) yield* Effect.sleep(Duration.millis(10))
  })

/** BRAIN_ENVIRONMENTS's bindings from `{name: base_url or binding}`, variables looked up in `env`. */
export const bindingsOf = (bindings: Record<string, string | Record<string, unknown>>, env: Record<string, string> = {}): EnvironmentBindings =>
  Either.getOrThrow(parseEnvironmentBindings(
    {
      source: "test",
      text: JSON.stringify(Object.fromEntries(Object.entries(bindings).map(([n, b]) => [n, typeof b === "string" ? { driver: "http", base_url: b } : { driver: "http", ...b }])))
    },
    (n) => env[n]
  ))

/** The fake Environment run as a process of its own (a stop's tests kill the server around it). */
export interface FakeProcess {
  readonly url: string
  readonly child: ChildProcess
  /** Every line logged: requests, and `closed` events (a request Brain closed before its answer). */
  readonly log: () => ReadonlyArray<LogLine>
}

/** Starts the fake Environment in a child process with the lifecycle behaviour given (HTTP_ENV_LIFECYCLE). */
export const startFake = async (lifecycle: Record<string, unknown>): Promise<FakeProcess> => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-e2e-fake-env-")), "requests.jsonl")
  const child = spawn(process.execPath, [FAKE_ENVIRONMENT], {
    env: { ...process.env, HTTP_ENV_LOG: file, HTTP_ENV_LIFECYCLE: JSON.stringify(lifecycle) },
    stdio: ["ignore", "pipe", "inherit"]
  })
  const first = await new Promise<string>((resolve) => readline.createInterface({ input: child.stdout! }).once("line", resolve))
  const log = () => (fs.existsSync(file) ? fs.readFileSync(file, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as LogLine) : [])
  return { url: `http://127.0.0.1:${JSON.parse(first).port}`, child, log }
}
