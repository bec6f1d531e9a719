/**
 * The example loop (loops/examples/echo-with-memory.ts, built to dist/loops/examples/) against a
 * scripted host that keeps kv between turns, as Brain does: it counts turns in kv, asks the model
 * with the saved transcript and the user's message, saves the answer, emits its Event, and ends the
 * turn with a host error as soon as one comes. The example tool (loops/examples/echo-tool.ts)
 * answers with its call's input and makes no host call.
 */
import { describe, expect, it } from "@effect/vitest"
import { type Answerer, runGuest, shippedGuest, Wasm } from "./harness.js"

const echo = shippedGuest("examples/echo-with-memory")
const echoTool = shippedGuest("examples/echo-tool")

const input = (message: string, transcript: Array<unknown>) => JSON.stringify({
  input: { message },
  transcript,
  configuration: { agentloop: "sha256…" },
  events: [],
  runtime: { session_id: "ses_1", turn: 1, activation: 2, now_ms: 0, seed: 1 }
})

/** A host with one kv store for the session and a model that answers "you said: <last message>". */
const session = (fail?: { op: string; code: string }) => {
  const kv = new Map<string, unknown>()
  let sequence = 10
  const answer: Answerer = (op, request) => {
    if (fail && op === fail.op) return { error: { code: fail.code, message: `${op} failed`, retryable: false, ambiguous: false } }
    switch (op) {
      case "kv_read":
        return { ok: kv.has(request.key) ? { found: true, value: kv.get(request.key) } : { found: false } }
      case "kv_put":
        kv.set(request.key, request.value)
        return { ok: null }
      case "model":
        return { ok: { text: `you said: ${request.messages[request.messages.length - 1].content}`, tool_calls: [], stop_reason: "end" } }
      case "set_transcript":
        return { ok: null }
      case "emit":
        return { ok: { sequence: sequence++ } }
      default:
        return { error: { code: "invalid_request", message: op, retryable: false, ambiguous: false } }
    }
  }
  return { kv, answer }
}

describe("the echo-with-memory example loop", () => {
  it("is a module Brain would admit", () => {
    expect(Wasm.Module.imports(echo.module).map((i) => `${i.module}.${i.name}`).sort()).toEqual(["brain.call", "brain.fail", "env.memory"])
    expect(Wasm.Module.exports(echo.module).map((e) => e.name)).toEqual(expect.arrayContaining(["brain_abi_v1", "brain_alloc", "brain_run"]))
  })

  it("counts turns in kv across activations and answers with the count and the model's text", () => {
    const { kv, answer } = session()
    const first = runGuest(echo, input("hello", []), answer)
    expect(first.calls).toEqual([
      { op: "kv_read", request: `{"key":"turns"}` },
      { op: "kv_put", request: `{"key":"turns","value":1}` },
      { op: "model", request: `{"messages":[{"role":"user","content":"hello"}]}` },
      { op: "set_transcript", request: `{"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"Turn 1: you said: hello"}]}` },
      { op: "emit", request: `{"kind":"echo.turn","payload":{"turn":1}}` }
    ])
    expect(first.output).toBe(`{"ok":{"text":"Turn 1: you said: hello","turn":1}}`)

    const saved = JSON.parse(first.calls[3]!.request).messages
    const second = runGuest(echo, input("again", saved), answer)
    expect(second.output).toBe(`{"ok":{"text":"Turn 2: you said: again","turn":2}}`)
    expect(JSON.parse(second.calls[3]!.request).messages).toHaveLength(4)
    expect(kv.get("turns")).toBe(2)
  })

  for (const op of ["kv_read", "kv_put", "model", "set_transcript", "emit"]) {
    it(`a ${op} error ends the turn with that error, its flags as they came`, () => {
      const run = runGuest(echo, input("hello", []), session({ op, code: "cancelled" }).answer)
      expect(run.calls[run.calls.length - 1]!.op).toBe(op)
      const flags = JSON.parse(run.output!).error
      expect(run.output).toBe(`{"error":{"code":"cancelled","message":"${op} failed","retryable":${flags.retryable},"ambiguous":${flags.ambiguous}}}`)
    })
  }
})

describe("the echo-tool example tool", () => {
  const refuseAll: Answerer = (op) => ({ error: { code: "invalid_request", message: op, retryable: false, ambiguous: false } })
  const call = { session_id: "ses_1", sequence: 7, name: "echo", deadline_at_ms: 1 }

  it("is a tool module Brain would admit, with no loop entry", () => {
    // It calls no host service, so the compiler leaves brain.call out: a subset of the ABI's imports.
    const imports = Wasm.Module.imports(echoTool.module).map((i) => `${i.module}.${i.name}`)
    expect(imports).toContain("env.memory")
    for (const i of imports) expect(["brain.call", "brain.fail", "env.memory"]).toContain(i)
    const exports = Wasm.Module.exports(echoTool.module).map((e) => e.name)
    expect(exports).toEqual(expect.arrayContaining(["brain_abi_v1", "brain_alloc", "brain_tool"]))
    expect(exports).not.toContain("brain_run")
  })

  it("answers ok with its call's input as the output, making no host call", () => {
    for (const input of [{ i: 3, text: "héllo", nested: [1, { a: null }] }, "plain", 12.5, [true, false]]) {
      const run = runGuest(echoTool, JSON.stringify({ input, call }), refuseAll, { entry: "brain_tool" })
      expect(run.calls).toEqual([])
      expect(JSON.parse(run.output!)).toEqual({ ok: input })
    }
  })

  it("answers an error value when the call carries no input", () => {
    const run = runGuest(echoTool, JSON.stringify({ call }), refuseAll, { entry: "brain_tool" })
    expect(JSON.parse(run.output!)).toEqual({ error: { message: "the call has no input" } })
  })
})
