/**
 * A real `kill -9` in the middle of a turn (seed "Effects happen after commit", "Suspension and
 * recovery"; DESIGN §3, §6).
 *
 * A child process (test/fixtures/turnChild.mjs, running the compiled Sessions over the file
 * journal) has its model and its tool executor in this process, over loopback HTTP: the parent's
 * small server counts every request by kind and started sequence — a dispatch counter kept
 * outside the process that is killed — and holds the request of the step under test open. Once
 * that request arrives (so its `*_started` record was durable before it was sent), the parent
 * SIGKILLs the child. A second child then reopens the data directory: its first access recovers
 * the session, and its next turn must work. The parent finally reads the journal itself.
 */
import { execSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { Message } from "../../src/domain/Messages.js"
import { foldAll } from "../../src/domain/Projection.js"
import { EffectKinds, type JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const FIXTURE = path.join(ROOT, "test/fixtures/turnChild.mjs")

/** Milliseconds a child may take to start and reach the held request (or to finish its turn). */
const CHILD_DEADLINE_MS = 20_000

/** `npm test` builds first; a direct `vitest run` of this file builds only when dist is missing. */
const ensureBuilt = () => {
  if (!fs.existsSync(path.join(ROOT, "dist/layers/SessionsJournal.js"))) {
    execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  }
}

// ---------------------------------------------------------------------------------------------
// The parent's executor: counts every dispatch and answers or holds it

interface Dispatched {
  readonly route: "/model" | "/tool"
  readonly sequence: number
  readonly body: any
}

type Answer = { readonly hold: true } | { readonly reply: unknown }

interface Executor {
  readonly port: number
  readonly log: Array<Dispatched>
  /** Decides each request's answer. */
  plan: (d: Dispatched, nth: number) => Answer
  /** Resolves when a request is being held open. */
  held: Promise<Dispatched>
}

const startExecutor = Effect.acquireRelease(
  Effect.async<{ executor: Executor; server: http.Server }>((resume) => {
    let onHeld: (d: Dispatched) => void = () => {}
    const executor: Executor = {
      port: 0,
      log: [],
      plan: () => ({ hold: true }),
      held: new Promise(() => {})
    }
    const armHeld = () => {
      executor.held = new Promise((resolve) => (onHeld = resolve))
    }
    armHeld()
    const server = http.createServer((req, res) => {
      let text = ""
      req.setEncoding("utf8")
      req.on("data", (chunk: string) => void (text += chunk))
      req.on("end", () => {
        const body = JSON.parse(text || "{}")
        const d: Dispatched = { route: req.url as Dispatched["route"], sequence: body.sequence, body }
        executor.log.push(d)
        const answer = executor.plan(d, executor.log.filter((x) => x.route === d.route).length)
        if ("hold" in answer) {
          onHeld(d)
          armHeld()
          return // Never answered: the child is killed while it waits.
        }
        res.writeHead(200, { "content-type": "application/json" })
        res.end(JSON.stringify(answer.reply))
      })
    })
    server.listen(0, "127.0.0.1", () => {
      ;(executor as { port: number }).port = (server.address() as AddressInfo).port
      resume(Effect.succeed({ executor, server }))
    })
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
).pipe(Effect.map(({ executor }) => executor))

const text = (t: string) => ({ text: t, tool_calls: [], stop_reason: "end" })
const askTool = { text: "", tool_calls: [{ id: "call_1", name: "probe_tool", input: { x: 1 } }], stop_reason: "tool_calls" }

// ---------------------------------------------------------------------------------------------
// Children

interface ChildRun {
  readonly lines: ReadonlyArray<string>
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stderr: string
}

/**
 * Runs a child. With `killWhen`, SIGKILLs it as soon as that promise resolves (and fails the
 * run if the child has not got there within CHILD_DEADLINE_MS); otherwise waits for it to exit.
 */
const runChild = (args: ReadonlyArray<string>, killWhen?: Promise<unknown>) =>
  Effect.async<ChildRun, Error>((resume) => {
    const child = spawn(process.execPath, [FIXTURE, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
    const lines: Array<string> = []
    let pending = ""
    let stderr = ""
    const deadline = setTimeout(() => child.kill("SIGKILL"), CHILD_DEADLINE_MS)
    void killWhen?.then(() => child.kill("SIGKILL"))
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (chunk: string) => {
      pending += chunk
      const parts = pending.split("\n")
      pending = parts.pop()!
      lines.push(...parts)
    })
    child.stderr.setEncoding("utf8")
    child.stderr.on("data", (chunk: string) => void (stderr += chunk))
    child.on("error", (err) => resume(Effect.fail(err)))
    child.on("close", (code, signal) => {
      clearTimeout(deadline)
      resume(Effect.succeed({ lines, code, signal, stderr }))
    })
    return Effect.sync(() => {
      clearTimeout(deadline)
      child.kill("SIGKILL")
    })
  })

const lineOf = (run: ChildRun, word: string) => {
  const line = run.lines.find((l) => l.startsWith(`${word} `))
  return line === undefined ? undefined : line.slice(word.length + 1)
}

/** Every record of the session, read by this process once the children are gone. */
const readAll = (dataDir: string, session: SessionId) =>
  Effect.scoped(
    Effect.gen(function*() {
      const journal = yield* JournalFile.make({ dataDir, lockWaitMs: 0 }).pipe(Effect.provide(nodeFiles))
      const out: Array<JournalRecord> = []
      for (;;) {
        const page = yield* journal.read(session, { after: out.length, limit: 1000 })
        if (page.length === 0) return out
        out.push(...page)
      }
    })
  )

const unansweredToolCalls = (messages: ReadonlyArray<Message>) =>
  messages.flatMap((m, i) => {
    if (m.role !== "assistant" || !m.tool_calls?.length) return []
    const answered = new Set<string>()
    for (let j = i + 1; j < messages.length && messages[j]!.role === "tool"; j++) answered.add(messages[j]!.tool_call_id ?? "")
    return m.tool_calls.filter((c) => !answered.has(c.id)).map((c) => c.id)
  })

const closers = new Set<string>(Object.values(EffectKinds).flat())

// ---------------------------------------------------------------------------------------------
// The scenario: kill while one step's request is held, reopen, check

const crashDuring = (step: "model" | "tool") =>
  Effect.gen(function*() {
    const dir = yield* tempDir("brain-turncrash-")
    const executor = yield* startExecutor

    // 1. The first child: its turn's model (or tool) request is held, then it is killed.
    executor.plan = (d, nth) =>
      d.route === "/model"
        ? step === "model" ? { hold: true } : nth === 1 ? { reply: askTool } : { reply: text("unexpected") }
        : { hold: true }
    const held = executor.held
    const crashed = yield* runChild([dir, String(executor.port), "crash"], held)
    expect(crashed.signal, `the first child was not killed: ${crashed.stderr}`).toBe("SIGKILL")
    const session = lineOf(crashed, "session") as SessionId | undefined
    expect(session, crashed.stderr).toBeDefined()
    const heldRequest = yield* Effect.promise(() => held)
    expect(heldRequest.route).toBe(step === "model" ? "/model" : "/tool")
    const beforeRestart = executor.log.length

    // 2. The second child: the first access recovers without dispatching; the next turn works.
    let atRecovery = -1
    executor.plan = (d) => {
      if (atRecovery < 0 && d.route === "/model") atRecovery = executor.log.length - 1
      return d.route === "/model" ? { reply: text("after the crash") } : { reply: { ok: true } }
    }
    const reopened = yield* runChild([dir, String(executor.port), "reopen", session!])
    expect(reopened.code, reopened.stderr).toBe(0)
    const recovered = JSON.parse(lineOf(reopened, "recovered") ?? "null")
    expect(recovered).toMatchObject({ session_id: session, status: "idle" })
    const outcome = JSON.parse(lineOf(reopened, "turn") ?? "null")
    expect(outcome?.turn).toMatchObject({ status: "ended", result: { text: "after the crash" } })

    // 3. The journal, as this process reads it.
    const records = yield* readAll(dir, session!)
    records.forEach((r, i) => expect(r.sequence, "sequences are dense").toBe(i + 1))
    const at = (kind: string, nth = 0) => records.filter((r) => r.kind === kind)[nth]
    const closing = (seq: number) => records.filter((r) => r.payload?.sequence === seq && r.sequence > seq)

    const turn1 = at("turn_started", 0)!
    const activation1 = at("activation_started", 0)!
    const turn2 = at("turn_started", 1)!
    expect(turn2, "the second turn was journaled").toBeDefined()
    const startedKind = step === "model" ? "model_call_started" : "tool_call_started"
    const interrupted = records.filter((r) => r.kind === startedKind && r.sequence < turn2.sequence).at(-1)!
    expect(interrupted.sequence).toBe(heldRequest.sequence)

    // The held effect: exactly one outcome, recorded by recovery, ambiguous (the tool's is unknown).
    const outcomes = closing(interrupted.sequence)
    expect(outcomes).toHaveLength(1)
    if (step === "model") {
      expect(outcomes[0]).toMatchObject({ kind: "model_call_failed", payload: { failure: { ambiguous: true } } })
    } else {
      expect(outcomes[0]).toMatchObject({
        kind: "tool_call_failed",
        payload: { outcome: "unknown", is_error: true, failure: { ambiguous: true } }
      })
    }
    // The interrupted activation and turn are closed as interrupted, before the next turn starts.
    expect(closing(activation1.sequence)).toMatchObject([{ kind: "activation_failed", payload: { failure: { code: "interrupted" } } }])
    expect(closing(turn1.sequence)).toMatchObject([{ kind: "turn_failed", payload: { failure: { code: "interrupted" } } }])
    for (const r of [outcomes[0]!, ...closing(activation1.sequence), ...closing(turn1.sequence)]) {
      expect(r.sequence, `${r.kind} is written by recovery, before the next turn`).toBeLessThan(turn2.sequence)
    }
    // Every started effect of the whole journal has exactly one outcome; the second turn ended.
    for (const r of records.filter((r) => r.kind in EffectKinds)) {
      expect(closing(r.sequence).filter((c) => closers.has(c.kind)), `${r.sequence} ${r.kind}`).toHaveLength(1)
    }
    expect(closing(turn2.sequence)).toMatchObject([{ kind: "turn_ended" }])

    // Each dispatch reached the executor exactly once, and recovery dispatched nothing.
    const counts = new Map<string, number>()
    for (const d of executor.log) counts.set(`${d.route}:${d.sequence}`, (counts.get(`${d.route}:${d.sequence}`) ?? 0) + 1)
    expect([...counts.values()].every((n) => n === 1), JSON.stringify([...counts])).toBe(true)
    const dispatchedStarts = records.filter((r) => r.kind === "model_call_started" || r.kind === "tool_call_started")
    expect(executor.log.map((d) => `${d.route}:${d.sequence}`).sort()).toEqual(
      dispatchedStarts.map((r) => `${r.kind === "model_call_started" ? "/model" : "/tool"}:${r.sequence}`).sort()
    )
    expect(atRecovery, "the second child's first dispatch is the next turn's model call").toBe(beforeRestart)
    for (const d of executor.log.slice(beforeRestart)) {
      expect(d.sequence, `${d.route} dispatched again after the restart`).toBeGreaterThan(turn2.sequence)
    }

    // The next turn's loop saw the interruption in its Events, and its model was told.
    const seen = records.find((r) => r.kind === "kv_put" && r.payload.key === `seen.${at("activation_started", 1)!.sequence}`)
    // (Its Events start after the interrupted activation's close, so they hold the turn_failed;
    // the effect's failure precedes that close and is read with host.events.)
    expect(seen?.payload.value).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kind: "turn_failed", sequence: closing(turn1.sequence)[0]!.sequence, code: "interrupted" })
      ])
    )
    const nextRequest = executor.log.slice(beforeRestart).find((d) => d.route === "/model")!.body.request
    const messages: ReadonlyArray<Message> = nextRequest.messages
    expect(messages.some((m) => m.role === "system" && String(m.content).includes("previous turn did not finish"))).toBe(true)
    expect(messages.at(-1)).toEqual({ role: "user", content: "again" })
    // The tool call the crash orphaned has a result, in the request and in the saved transcript.
    expect(unansweredToolCalls(messages)).toEqual([])
    const transcript = foldAll(records).transcript
    expect(unansweredToolCalls(transcript)).toEqual([])
    if (step === "tool") {
      expect(messages.some((m) => m.role === "tool" && m.tool_call_id === "call_1")).toBe(true)
    }
  })

describe("kill -9 of a Brain process in the middle of a turn", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("killed while its model request is in flight: restart records model_call_failed (ambiguous) and the turn as interrupted, never resends it, and the next turn sees it", () =>
    crashDuring("model"), 60_000)

  it.scopedLive("killed while its tool request is in flight: restart records tool_call_failed (unknown), never resends it, and the next turn answers the orphaned call", () =>
    crashDuring("tool"), 60_000)
})
