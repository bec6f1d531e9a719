/**
 * The compiled official loop (dist/loops/official.wasm, which sends its transcript as deltas)
 * and the TypeScript official loop (src/loops/official.ts, which sends it whole) journal the same
 * records, byte for byte but for the times, over a multi-turn session with tool calls, a repair of
 * a transcript it was created with, a turn interrupted during a tool call, the repair and
 * note the next turn makes of it, and a turn with media: the real sessions runtime and Host, the scripted model and
 * in-process tools; the Wasm loop through the WebAssembly host's worker threads and host bridge.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import { officialLoop } from "../../src/loops/official.js"
import { Agentloops } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"
import { ROOT } from "./harness.js"

const OFFICIAL = path.join(ROOT, "dist", "loops", "official.wasm")
const WASM = { workers: 1, memoryBytes: 64 * 1024 * 1024, computeMs: 10_000, ioBytes: 16 * 1024 * 1024, moduleBytes: 32 * 1024 * 1024 }

const TOOLS = { read: ToolsInProcess.succeedAfter(1, (input) => ({ read: input })), stuck: ToolsInProcess.hang }

const REPLIES = [
  // turn 1: two calls together, then the answer
  { text: "looking", tool_calls: [{ name: "read", input: { path: "/a" } }, { name: "read", input: { path: "/b", n: 12345678901234567890 } }] },
  { text: "done" },
  // turn 2: a call that hangs until the turn is interrupted
  { text: "waiting", tool_calls: [{ name: "stuck", input: {} }] },
  // turn 3: after the repair and the note, a call and the answer
  { text: "again", tool_calls: [{ name: "read", input: { path: "/c" } }] },
  { text: "recovered" },
  // turn 4: a message with media, answered at once
  { text: "two pictures" }
]

const MEDIA = [{ type: "image", url: "https://example.com/a.png" }, { type: "image", data: "iVBORw0KGgo=", mime_type: "image/png" }]

/** Created with an assistant message whose first call has no result, in the middle of the transcript. */
const CREATED = [
  { role: "user" as const, content: "go" },
  { role: "assistant" as const, content: "", tool_calls: [{ id: "a", name: "read", input: {} }, { id: "b", name: "read", input: {} }] },
  { role: "tool" as const, tool_call_id: "b", content: "\"ok\"" },
  { role: "user" as const, content: "next" },
  { role: "assistant" as const, content: "fine" }
]

/** Polls (real time) until `check` holds. */
const eventually = <R>(what: string, check: Effect.Effect<boolean, never, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 2000; i++) {
      if (yield* check) return
      yield* Effect.sleep("5 millis")
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

const recordsOf = (session: SessionId) =>
  Effect.flatMap(Journal, (journal) => Effect.orDie(journal.read(session, { after: 0, limit: 1_000_000 })))

/** The session's records as text, without their times (the only thing two runs may differ in). */
const comparable = (records: ReadonlyArray<JournalRecord>) =>
  records.map(({ recorded_at_ms: _, ...r }) =>
    JSON.stringify(r.kind === "tool_call_started" ? { ...r, payload: { ...r.payload, deadline_at_ms: "(time)" } } : r))

/** The scenario, in a runtime of its own; returns the session's records and the turns' outcomes. */
const scenario = (wasm: boolean) =>
  Effect.gen(function*() {
    const official = yield* (yield* Agentloops).resolve("official")
    expect(official === officialLoop, "the official loop is the TypeScript one only without the module").toBe(!wasm)
    const sessions = yield* Sessions
    const { session_id: s } = yield* sessions.create({
      model: { provider: "scripted", replies: REPLIES },
      tools: [{ name: "read" }, { name: "stuck" }],
      transcript: CREATED
    })
    const first = yield* sessions.send(s, { message: "hello" })
    yield* sessions.submit(s, { message: "wait for it" })
    yield* eventually("the stuck call to start", Effect.map(recordsOf(s), (rs) => rs.some((r) => r.kind === "tool_call_started" && r.payload.tool === "stuck")))
    yield* sessions.interrupt(s)
    yield* eventually("the interrupted turn to close", Effect.map(recordsOf(s), (rs) => rs.filter((r) => r.kind === "turn_failed").length === 1))
    const third = yield* sessions.send(s, { message: "try again" })
    const fourth = yield* sessions.send(s, { message: "look", media: MEDIA })
    const records = yield* recordsOf(s)
    const transcript = (yield* sessions.transcript(s)).messages
    return { turns: [first.turn, third.turn, fourth.turn].map(({ sequence: _, ...t }) => t), records, transcript }
  }).pipe(
    Effect.provide(runtimeLayer({
      tools: TOOLS,
      ...(wasm ? { wasm: WASM, officialModule: new Uint8Array(fs.readFileSync(OFFICIAL)) } : {})
    }))
  )

describe("the official loop's journal, Wasm and TypeScript", () => {
  it.scopedLive("a multi-turn session with tool calls, a repair of its created transcript, an interrupted turn and its repair (from the committed outcome), and a turn with media: the same records, byte for byte but for the times", () =>
    Effect.gen(function*() {
      const ts = yield* scenario(false)
      const wasm = yield* scenario(true)
      expect(wasm.turns).toEqual(ts.turns)
      expect(wasm.turns).toEqual([
        { status: "ended", result: { text: "done" } },
        { status: "ended", result: { text: "recovered" } },
        { status: "ended", result: { text: "two pictures" } }
      ])
      expect(comparable(wasm.records)).toEqual(comparable(ts.records))
      expect(wasm.transcript).toEqual(ts.transcript)

      // The scenario did what it says: both repairs happened and the interrupted turn was noted.
      const kinds = ts.records.map((r) => r.kind)
      expect(kinds.filter((k) => k === "turn_failed")).toHaveLength(1)
      expect(kinds.filter((k) => k === "model_call_started")).toHaveLength(6)
      expect(kinds.filter((k) => k === "tool_call_started")).toHaveLength(4)
      // The created transcript's call never ran here: it is told interrupted. The interrupted
      // turn's call is answered with the cancel its record committed.
      const interrupted = ts.transcript.filter((m) => m.role === "tool" && String(m.content).includes("the call was interrupted"))
      expect(interrupted.map((m) => m.tool_call_id)).toEqual(["a"])
      const stuck = ts.records.find((r) => r.kind === "tool_call_started" && r.payload.tool === "stuck")!
      const stuckOutcome = ts.records.find((r) => r.kind === "tool_call_failed" && r.payload.sequence === stuck.sequence)!
      expect(ts.transcript.filter((m) => m.role === "tool" && m.tool_call_id === stuck.payload.call_id).map((m) => JSON.parse(String(m.content)))).toEqual([
        { outcome: "cancelled", error: { code: stuckOutcome.payload.failure.code, message: stuckOutcome.payload.failure.message } }
      ])
      expect(ts.transcript.some((m) => m.role === "system" && String(m.content).startsWith("Note from Brain: the previous turn did not finish (cancelled"))).toBe(true)
      // The save riding on the first model call (the repair and the user's message) kept the
      // created transcript up to the inserted result; the call's context is the saved transcript.
      const started = ts.records.filter((r) => r.kind === "model_call_started")
      const save = ts.records.find((r) => r.sequence === started[0]!.sequence - 1)!
      expect([save.kind, save.payload.keep]).toEqual(["transcript_delta", 3])
      expect(started[0]!.payload.context).toEqual({ through_sequence: save.sequence, delta: { keep: 7, append: [] } })
      // The media went to the model as parts after the text, and are kept in the transcript.
      expect(ts.transcript.slice(-2)).toEqual([
        { role: "user", content: [{ type: "text", text: "look" }, ...MEDIA] },
        { role: "assistant", content: "two pictures" }
      ])
    }), 60_000)
})
