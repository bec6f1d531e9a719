/**
 * An in-process tool that does not stop when interrupted (an uninterruptible region), its turn
 * stopped by `interrupt`, the runtime's close or the turn's wall deadline: the call's outcome
 * (`unknown`, the executor did not confirm it stopped) is durable before the turn's closing
 * records, and the turn's failure names the tool as what did not stop, not the Agentloop (the
 * official loop, which is stopped when interrupted). The tool waits on a promise the test holds,
 * released only once the journal has been read: a stop that waited for it would never return.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect, ManagedRuntime } from "effect"
import { layer, Sessions } from "../../src/effect.js"
import type { ToolHandler } from "../../src/layers/ToolsInProcess.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import type { ServerConfigShape } from "../../src/services/ServerConfig.js"
import { Journal } from "../../src/services/Journal.js"

const dirs: Array<string> = []
const holds: Array<() => void> = []
const held = () => new Promise<void>((resolve) => void holds.push(resolve))
afterEach(() => {
  for (const release of holds.splice(0)) release()
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})
const freshDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-stuck-tool-"))
  dirs.push(dir)
  return dir
}

/** Ignores interruption until the test is over. */
const stuck: ToolHandler = () => Effect.uninterruptible(Effect.promise(held)).pipe(Effect.as({ outcome: "ok", output: "late" } as const))

const session = {
  model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name: "stuck", input: {} }] }, { text: "done" }] },
  tools: [{ name: "stuck" }]
}

const readAll = (runtime: ManagedRuntime.ManagedRuntime<Journal | Sessions, unknown>, s: string) =>
  runtime.runPromise(Effect.gen(function*() {
    yield* (yield* Sessions).get(s as never)
    return yield* Effect.orDie((yield* Journal).read(s as never, { after: 0, limit: 1000 }))
  }))

const untilRecorded = (runtime: ManagedRuntime.ManagedRuntime<Journal, unknown>, s: string, kind: string) =>
  runtime.runPromise(Effect.gen(function*() {
    const journal = yield* Journal
    for (let i = 0; i < 2000; i++) {
      if ((yield* Effect.orDie(journal.read(s as never, { after: 0, limit: 1000 }))).some((r) => r.kind === kind)) return
      yield* Effect.promise(() => new Promise((r) => setTimeout(r, 10)))
    }
    return yield* Effect.dieMessage(`no ${kind} was recorded`)
  }))

/** The tool call's outcome comes before the turn's close, and the close blames the tool, not the loop. */
const expectOutcomeBeforeClose = (records: ReadonlyArray<JournalRecord>, code: string) => {
  const kinds = records.map((r) => r.kind).filter((k) => /^(tool_call_(ended|failed)|activation_(ended|failed)|turn_(ended|failed))$/.test(k))
  expect(kinds).toEqual(["tool_call_failed", "activation_failed", "turn_failed"])
  expect(records.find((r) => r.kind === "tool_call_failed")!.payload).toMatchObject({ outcome: "unknown", failure: { code: "unknown", ambiguous: true } })
  for (const kind of ["activation_failed", "turn_failed"]) {
    const f = (records.find((r) => r.kind === kind)!.payload as { failure: { code: string; message: string; ambiguous: boolean } }).failure
    expect(f.code).toBe(code)
    expect(f.ambiguous).toBe(true)
    expect(f.message).not.toContain("agentloop")
    expect(f.message).toContain("stuck")
  }
}

const grace: Partial<ServerConfigShape> = { cancelGraceMs: 200, cleanupDeadlineMs: 1000 }

describe("an in-process tool that does not stop: its outcome is durable before its turn closes", () => {
  it("interrupt: tool_call_failed unknown, then activation_failed and turn_failed cancelled naming the tool", async () => {
    const dataDir = freshDir()
    const runtime = ManagedRuntime.make(layer({ dataDir, ...grace }, { tools: { stuck } }))
    try {
      const s = await runtime.runPromise(Effect.map(Effect.flatMap(Sessions, (x) => x.create(session)), (c) => c.session_id))
      await runtime.runPromise(Effect.flatMap(Sessions, (x) => x.submit(s, { message: "go" })))
      await untilRecorded(runtime, s, "tool_call_started")
      await runtime.runPromise(Effect.flatMap(Sessions, (x) => x.interrupt(s)))
      expectOutcomeBeforeClose(await readAll(runtime, s), "cancelled")
    } finally {
      await runtime.dispose()
    }
  }, 60_000)

  it("the runtime's close: tool_call_failed unknown, then activation_failed and turn_failed interrupted naming the tool", async () => {
    const dataDir = freshDir()
    const runtime = ManagedRuntime.make(layer({ dataDir, ...grace }, { tools: { stuck } }))
    const s = await runtime.runPromise(Effect.map(Effect.flatMap(Sessions, (x) => x.create(session)), (c) => c.session_id))
    const sent = runtime.runPromiseExit(Effect.flatMap(Sessions, (x) => x.send(s, { message: "go" })))
    await untilRecorded(runtime, s, "tool_call_started")
    await runtime.dispose()
    await sent
    const again = ManagedRuntime.make(layer({ dataDir }))
    try {
      expectOutcomeBeforeClose(await readAll(again, s), "interrupted")
    } finally {
      await again.dispose()
    }
  }, 60_000)

  it("the turn's wall deadline: tool_call_failed unknown, then activation_failed and turn_failed timeout naming the tool; the send answers that failure", async () => {
    const dataDir = freshDir()
    const runtime = ManagedRuntime.make(layer({ dataDir, ...grace, maxTurnMs: 300 }, { tools: { stuck } }))
    try {
      const s = await runtime.runPromise(Effect.map(Effect.flatMap(Sessions, (x) => x.create(session)), (c) => c.session_id))
      const answer = await runtime.runPromise(Effect.flatMap(Sessions, (x) => x.send(s, { message: "go" })))
      expect(answer.turn).toMatchObject({ status: "failed", failure: { code: "timeout" } })
      expect((answer.turn as { failure: { message: string } }).failure.message).not.toContain("agentloop")
      expectOutcomeBeforeClose(await readAll(runtime, s), "timeout")
    } finally {
      await runtime.dispose()
    }
  }, 60_000)
})
