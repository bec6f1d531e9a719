/**
 * Generators of valid session journals for property tests.
 */
import fc from "fast-check"
import type { JournalRecord, RecordKind } from "../../src/domain/Records.js"

const message = fc.record({
  role: fc.constantFrom("user" as const, "assistant" as const, "tool" as const),
  content: fc.string({ maxLength: 12 })
})

const json = fc.oneof(fc.constant(null), fc.integer(), fc.string({ maxLength: 6 }), fc.boolean(), fc.array(fc.integer(), { maxLength: 3 }))

type Op =
  | { readonly op: "kv_put"; readonly key: string; readonly value: unknown }
  | { readonly op: "kv_delete"; readonly key: string }
  | { readonly op: "delta"; readonly keepFraction: number; readonly append: ReadonlyArray<{ role: "user" | "assistant" | "tool"; content: string }> }
  | { readonly op: "turn"; readonly request: { readonly key: string; readonly hash: string } | undefined }
  | { readonly op: "model" }
  | { readonly op: "tool" }
  | { readonly op: "close"; readonly pick: number; readonly ok: boolean }
  | { readonly op: "emit"; readonly kind: string }

const key = fc.constantFrom("a", "b", "c", "__proto__", "null")

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant("kv_put" as const), key, value: json }),
  fc.record({ op: fc.constant("kv_delete" as const), key }),
  fc.record({ op: fc.constant("delta" as const), keepFraction: fc.double({ min: 0, max: 1, noNaN: true }), append: fc.array(message, { maxLength: 3 }) }),
  fc.record({
    op: fc.constant("turn" as const),
    request: fc.option(fc.record({ key: fc.constantFrom("k1", "k2", "k3"), hash: fc.constantFrom("h1", "h2") }), { nil: undefined })
  }),
  fc.record({ op: fc.constant("model" as const) }),
  fc.record({ op: fc.constant("tool" as const) }),
  fc.record({ op: fc.constant("close" as const), pick: fc.nat(), ok: fc.boolean() }),
  fc.record({ op: fc.constant("emit" as const), kind: fc.constantFrom("progress", "note") })
)

/** A journal: creation first, then a random mix of state changes, turns and effects. */
export const journalArb: fc.Arbitrary<ReadonlyArray<JournalRecord>> = fc.array(op, { maxLength: 60 }).map((ops) => {
  const records: Array<JournalRecord> = []
  const push = (kind: RecordKind, payload: unknown) =>
    records.push({ sequence: records.length + 1, recorded_at_ms: 1_000 + records.length, kind, payload })
  push("session_creation_started", { configuration: { agentloop: "official", model: { provider: "scripted" } } })
  push("session_creation_ended", { sequence: 1 })
  let length = 0
  const open: Array<{ seq: number; kind: "model" | "tool" | "turn"; key?: string }> = []
  for (const o of ops) {
    switch (o.op) {
      case "kv_put":
        push("kv_put", { key: o.key, value: o.value })
        break
      case "kv_delete":
        push("kv_delete", { key: o.key })
        break
      case "delta": {
        const keep = Math.floor(o.keepFraction * length)
        push("transcript_delta", { keep, append: o.append })
        length = keep + o.append.length
        break
      }
      case "turn":
        push("turn_started", { input: { message: "hi" }, mode: "send" })
        open.push({ seq: records.length, kind: "turn", ...(o.request ? { key: o.request.key } : {}) })
        // A keyed send's claim shares the turn's append.
        if (o.request) push("request_claimed", { mode: "send", key: o.request.key, request_hash: o.request.hash, at_ms: 1_000 + records.length })
        break
      case "model":
        push("model_call_started", { message_count: length, context: { through_sequence: 0, delta: { keep: length, append: [] } } })
        open.push({ seq: records.length, kind: "model" })
        break
      case "tool":
        push("tool_call_started", { tool: "t", call_id: `c${records.length}`, input: {}, deadline_at_ms: 9_999 })
        open.push({ seq: records.length, kind: "tool" })
        break
      case "close": {
        if (open.length === 0) break
        const [c] = open.splice(o.pick % open.length, 1)
        const failure = { code: "unknown", message: "x", retryable: false, ambiguous: true }
        if (c!.kind === "turn") {
          push(o.ok ? "turn_ended" : "turn_failed", o.ok ? { sequence: c!.seq } : { sequence: c!.seq, failure })
          // Answered by the turn's own close; a close like recovery's (failed) leaves it unanswered.
          if (c!.key !== undefined && o.ok) push("request_answered", { key: c!.key, at_ms: 1_000 + records.length })
        }
        if (c!.kind === "model") push(o.ok ? "model_call_ended" : "model_call_failed", o.ok ? { sequence: c!.seq, result: {} } : { sequence: c!.seq, failure })
        if (c!.kind === "tool") {
          push(
            o.ok ? "tool_call_ended" : "tool_call_failed",
            o.ok ? { sequence: c!.seq, outcome: "ok", output: 1, is_error: false } : { sequence: c!.seq, outcome: "unknown", failure, is_error: true }
          )
        }
        break
      }
      case "emit":
        push("extension", { kind: o.kind, payload: { n: records.length }, origin: { kind: "agentloop", sequence: 1 } })
        break
    }
  }
  return records
})
