/**
 * Uploaded modules over HTTP (docs/abi.md, docs/agentloops.md): admitted only when they speak the
 * ABI, bounded in size one by one and in total, listed, and removed only when no session uses
 * them; a session naming one that cannot run is refused at create.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { request, ROOT, ServerProcess, sharedServer } from "../support/server.js"
import { moduleLayout, PAGE_BYTES } from "../../src/layers/wasm/Module.js"
import { TWIN_FORMAT } from "../../src/layers/wasm/TwinExports.js"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import { calling, echoing, helloLoop, padded, returning, wat } from "../support/wat.js"

const wasm = (raw: Uint8Array) => ({ raw, headers: { "content-type": "application/wasm" } })

/** JSON text of arrays nested `levels` deep: `[[…]]`. */
const nested = (levels: number) => "[".repeat(levels) + "]".repeat(levels)

describe("uploaded modules", () => {
  const server = sharedServer({ env: { BRAIN_MAX_WASM_MODULE_BYTES: "100000", BRAIN_MAX_WASM_STORE_BYTES: "150000" } })

  it("are listed, refused removal while a session uses them, and removed once none does — their kept twin with them; then a session cannot name them", async () => {
    const loop = await helloLoop()
    const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(loop))
    expect(admitted.status).toBe(201)
    const id = admitted.body.id
    // Its instrumented twin is made after admission and kept for later starts (wasm/InlineModules.ts).
    const twin = path.join(server().dataDir, "agentloops", "twins", `${id}.v${TWIN_FORMAT}.wasm`)
    for (let i = 0; i < 500 && !fs.existsSync(twin); i++) await new Promise((r) => setTimeout(r, 20))
    expect(fs.existsSync(twin), "the twin is kept").toBe(true)
    const listed = await request(server().baseUrl, "/v1/agentloops")
    expect(listed.body.agentloops).toEqual([{ id, bytes: loop.length, loop: true, tool: false }])

    const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: id, model: { provider: "scripted" } } })).body.session_id
    // Refused while in use, retryable: its key keeps nothing, and the same keyed removal runs once the session is gone.
    const removal = { method: "DELETE", headers: { "idempotency-key": "remove-in-use" } }
    const inUse = await request(server().baseUrl, `/v1/agentloops/${id}`, removal)
    expect(inUse.status).toBe(409)
    expect(inUse.body).toMatchObject({ code: "conflict", retryable: true })
    expect(inUse.body.message).toContain(session)

    await request(server().baseUrl, `/v1/sessions/${session}/end`, { method: "POST" })
    expect((await request(server().baseUrl, `/v1/sessions/${session}`, { method: "DELETE" })).status).toBe(204)
    expect((await request(server().baseUrl, `/v1/agentloops/${id}`, removal)).status).toBe(204)
    expect((await request(server().baseUrl, `/v1/agentloops/${id}`, removal)).status).toBe(204)
    expect(fs.existsSync(twin), "the twin goes with the module").toBe(false)
    expect((await request(server().baseUrl, `/v1/agentloops/${id}`, { method: "DELETE" })).status).toBe(404)
    expect((await request(server().baseUrl, "/v1/agentloops")).body.agentloops).toEqual([])
    const refused = await request(server().baseUrl, "/v1/sessions", { json: { agentloop: id, model: { provider: "scripted" } } })
    expect(refused.status).toBe(400)
    expect((await request(server().baseUrl, `/v1/agentloops/${"x".repeat(64)}`, { method: "DELETE" })).status).toBe(400)
  })

  it("a loop exporting brain_events_from_end is given its Events from the previous activation's end on; one without it, from the previous activation's start on", async () => {
    const kindsSeen = async (bytes: Uint8Array) => {
      const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
      expect(admitted.status).toBe(201)
      const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" } } })).body.session_id
      const first = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "one" } } })
      expect(first.body.turn.status).toBe("ended")
      const second = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "two" } } })
      expect(second.body.turn.status).toBe("ended")
      return (second.body.turn.result.events as ReadonlyArray<{ kind: string }>).map((e) => e.kind)
    }
    expect(await kindsSeen(await wat(echoing("brain_run", undefined, { eventsFromEnd: true })))).toEqual([
      "activation_ended",
      "turn_ended",
      "turn_started",
      "activation_started"
    ])
    expect(await kindsSeen(await wat(echoing()))).toEqual([
      "activation_started",
      "activation_ended",
      "turn_ended",
      "turn_started",
      "activation_started"
    ])
  })

  it("a loop exporting brain_events_kind_<kind> globals is given only Events of those kinds, from the same range as without them", async () => {
    const kindsSeen = async (bytes: Uint8Array) => {
      const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
      expect(admitted.status).toBe(201)
      const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" } } })).body.session_id
      await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "one" } } })
      const second = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "two" } } })
      expect(second.body.turn.status).toBe("ended")
      return (second.body.turn.result.events as ReadonlyArray<{ kind: string }>).map((e) => e.kind)
    }
    expect(await kindsSeen(await wat(echoing("brain_run", undefined, { eventsFromEnd: true, eventKinds: ["turn_ended", "activation_started"] })))).toEqual([
      "turn_ended",
      "activation_started"
    ])
    expect(await kindsSeen(await wat(echoing("brain_run", undefined, { eventKinds: ["activation_started"] })))).toEqual(["activation_started", "activation_started"])
    expect(await kindsSeen(await wat(echoing("brain_run", undefined, { eventKinds: ["turn_failed"] })))).toEqual([])
  })

  it("a loop exporting brain_configuration_unread is given no configuration in its input; one without it, the session's configuration", async () => {
    const fieldsSeen = async (bytes: Uint8Array) => {
      const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
      expect(admitted.status).toBe(201)
      const tools = [{ name: "t", description: "a tool", input_schema: { type: "object" } }]
      const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" }, tools } })).body.session_id
      const turn = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "one" } } })
      expect(turn.body.turn.status).toBe("ended")
      return turn.body.turn.result as Record<string, unknown>
    }
    const unread = await fieldsSeen(await wat(echoing("brain_run", undefined, { configurationUnread: true })))
    expect(Object.keys(unread)).toEqual(["input", "transcript", "events", "runtime"])
    const read = await fieldsSeen(await wat(echoing()))
    expect(Object.keys(read)).toEqual(["input", "transcript", "configuration", "events", "runtime"])
    expect(read.configuration).toMatchObject({ tools: [{ name: "t", description: "a tool", input_schema: { type: "object" } }] })
  })

  it("a loop exporting brain_runtime_unread is given no runtime envelope in its input; one without it, the envelope", async () => {
    const seen = async (bytes: Uint8Array) => {
      const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
      expect(admitted.status).toBe(201)
      const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" } } })).body.session_id
      const turn = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "one" } } })
      expect(turn.body.turn.status).toBe("ended")
      return { session, result: turn.body.turn.result as Record<string, unknown> }
    }
    const unread = await seen(await wat(echoing("brain_run", undefined, { runtimeUnread: true })))
    expect(Object.keys(unread.result)).toEqual(["input", "transcript", "configuration", "events"])
    const read = await seen(await wat(echoing()))
    expect(Object.keys(read.result)).toEqual(["input", "transcript", "configuration", "events", "runtime"])
    expect(read.result.runtime).toMatchObject({ session_id: read.session })
  })

  it("a loop exporting brain_model_metadata_unread is given model answers of text, tool_calls and reasoning only; one without it, the whole answer", async () => {
    const answered = async (bytes: Uint8Array) => {
      const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
      expect(admitted.status).toBe(201)
      const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted", replies: [{ text: "hi back" }] } } })).body.session_id
      const turn = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "one" } } })
      expect(turn.body.turn.status).toBe("ended")
      return turn.body.turn.result as Record<string, unknown>
    }
    const ask = `{"messages":[{"role":"user","content":"hi"}]}`
    expect(await answered(await wat(calling("model", ask, "brain_run", { modelMetadataUnread: true })))).toEqual({ text: "hi back", tool_calls: [] })
    expect(await answered(await wat(calling("model", ask)))).toEqual({ text: "hi back", tool_calls: [], stop_reason: "end" })
  })

  it("the example Wasm tool, uploaded and named in a brain Environment, answers each call of two parallel rounds with its input, and the model sees every result", async () => {
    const bytes = new Uint8Array(fs.readFileSync(path.join(ROOT, "dist/loops/examples/echo-tool.wasm")))
    const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
    expect(admitted.status, admitted.text).toBe(201)
    expect(admitted.body).toMatchObject({ loop: false, tool: true })
    const round = (r: number) => ({ tool_calls: [0, 1, 2].map((i) => ({ name: "echo", input: { round: r, i, text: `é${i}` } })) })
    const created = await request(server().baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [round(1), round(2), { text: "done" }] },
        environments: [{ name: "wasm", driver: "brain" }],
        tools: [{ name: "echo", description: "answers with its input", module: admitted.body.id, environment: "wasm" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const session = created.body.session_id
    const sent = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "go" } } })
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn.status).toBe("ended")
    const transcript = (await request(server().baseUrl, `/v1/sessions/${session}/transcript`)).body.messages as ReadonlyArray<any>
    const calls = transcript.flatMap((m) => m.tool_calls ?? [])
    const results = transcript.filter((m) => m.role === "tool")
    expect(calls).toHaveLength(6)
    expect(results).toHaveLength(6)
    for (const call of calls) {
      const result = results.find((m) => m.tool_call_id === call.id)
      expect(result, `no result for ${call.id}`).toBeDefined()
      expect(JSON.parse(typeof result.content === "string" ? result.content : JSON.stringify(result.content))).toEqual(call.input)
    }
    expect(transcript[transcript.length - 1]).toMatchObject({ role: "assistant", content: "done" })
    const kinds = (await request(server().baseUrl, `/v1/sessions/${session}/events`)).body.events.map((e: { kind: string }) => e.kind)
    expect(kinds.filter((k: string) => k === "tool_call_started")).toHaveLength(6)
    expect(kinds.filter((k: string) => k === "tool_call_ended")).toHaveLength(6)
  })

  it("a module above BRAIN_MAX_WASM_MODULE_BYTES is refused 400; one that would pass BRAIN_MAX_WASM_STORE_BYTES 409 retryable, which its key does not keep: once room is made, the same keyed upload is admitted", async () => {
    const loop = await helloLoop()
    const tooBig = await request(server().baseUrl, "/v1/agentloops", wasm(padded(loop, 120_000)))
    expect(tooBig.status).toBe(400)
    expect(tooBig.body.message).toContain("BRAIN_MAX_WASM_MODULE_BYTES")
    const first = await request(server().baseUrl, "/v1/agentloops", wasm(padded(loop, 90_000)))
    expect(first.status).toBe(201)
    const keyed = { ...wasm(padded(loop, 80_000)), headers: { "content-type": "application/wasm", "idempotency-key": "upload-while-full" } }
    for (let i = 0; i < 2; i++) {
      const full = await request(server().baseUrl, "/v1/agentloops", keyed)
      expect(full.status).toBe(409)
      expect(full.body).toMatchObject({ code: "conflict", retryable: true })
      expect(full.body.message).toContain("BRAIN_MAX_WASM_STORE_BYTES")
    }
    expect((await request(server().baseUrl, `/v1/agentloops/${first.body.id}`, { method: "DELETE" })).status).toBe(204)
    const admitted = await request(server().baseUrl, "/v1/agentloops", keyed)
    expect(admitted.status, admitted.text).toBe(201)
    expect((await request(server().baseUrl, "/v1/agentloops", keyed)).text).toBe(admitted.text)
    expect((await request(server().baseUrl, `/v1/agentloops/${admitted.body.id}`, { method: "DELETE" })).status).toBe(204)
  })
})

describe("uploaded modules under concurrent requests", () => {
  // 10 distinct uploads at once: more than BRAIN_WASM_COMPILE_QUEUE's default (8) lets compile, which would refuse some 503 before the store's bound is reached.
  const server = sharedServer({ env: { BRAIN_MAX_WASM_MODULE_BYTES: "150000", BRAIN_MAX_WASM_STORE_BYTES: "350000", BRAIN_WASM_COMPILE_QUEUE: "16" } })

  it("a DELETE racing a create that names the module never both succeed: the create is 400 or the DELETE 409, and a created session runs", async () => {
    const loop = await helloLoop()
    for (let trial = 0; trial < 12; trial++) {
      const id = (await request(server().baseUrl, "/v1/agentloops", wasm(loop))).body.id
      const remove = () => request(server().baseUrl, `/v1/agentloops/${id}`, { method: "DELETE" })
      const create = () => request(server().baseUrl, "/v1/sessions", { json: { agentloop: id, model: { provider: "scripted" } } })
      const [removed, created] = trial % 2 === 0 ? await Promise.all([remove(), create()]) : (await Promise.all([create(), remove()])).reverse()
      if (created!.status === 201) {
        expect(removed!.status, `trial ${trial}`).toBe(409)
        const session = created!.body.session_id
        const sent = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "hi" } } })
        expect(sent.body.turn.status, `trial ${trial}`).toBe("ended")
        await request(server().baseUrl, `/v1/sessions/${session}/end`, { method: "POST" })
        expect((await request(server().baseUrl, `/v1/sessions/${session}`, { method: "DELETE" })).status).toBe(204)
        expect((await remove()).status).toBe(204)
      } else {
        expect([removed!.status, created!.status, created!.body.code], `trial ${trial}`).toEqual([204, 400, "invalid_request"])
      }
      expect((await request(server().baseUrl, "/v1/agentloops")).body.agentloops, `trial ${trial}`).toEqual([])
    }
  })

  it("20 identical concurrent uploads all answer 201 with one id and one stored copy; 10 distinct concurrent ones never pass BRAIN_MAX_WASM_STORE_BYTES", async () => {
    const loop = await helloLoop()
    const same = padded(loop, 100_000)
    const answers = await Promise.all(Array.from({ length: 20 }, () => request(server().baseUrl, "/v1/agentloops", wasm(same))))
    expect(new Set(answers.map((a) => `${a.status} ${a.body.id}`)).size).toBe(1)
    expect(answers[0]!.status).toBe(201)
    const stored = fs.readdirSync(path.join(server().dataDir, "agentloops")).filter((n) => n.endsWith(".wasm") || n.endsWith(".tmp"))
    expect(stored).toEqual([`${answers[0]!.body.id}.wasm`])
    expect((await request(server().baseUrl, `/v1/agentloops/${answers[0]!.body.id}`, { method: "DELETE" })).status).toBe(204)

    const distinct = await Promise.all(Array.from({ length: 10 }, (_, i) => request(server().baseUrl, "/v1/agentloops", wasm(padded(loop, 100_000 + i)))))
    expect(distinct.map((a) => a.status).sort()).toEqual([201, 201, 201, 409, 409, 409, 409, 409, 409, 409])
    const listed = (await request(server().baseUrl, "/v1/agentloops")).body.agentloops as ReadonlyArray<{ bytes: number }>
    expect(listed).toHaveLength(3)
    expect(listed.reduce((n, m) => n + m.bytes, 0)).toBeLessThanOrEqual(350_000)
  })
})

describe(`guest JSON nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH})`, () => {
  const server = sharedServer()

  const upload = async (text: string) => {
    const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(await wat(text)))
    expect(admitted.status, admitted.text).toBe(201)
    return admitted.body.id as string
  }
  const events = async (session: string) =>
    (await request(server().baseUrl, `/v1/sessions/${session}/events`)).body.events as ReadonlyArray<{ sequence: number; kind: string; data: any }>

  it("a Wasm tool's output nested 10,000 deep is outcome error: tool_call_ended closes its tool_call_started before the loop sees that outcome", async () => {
    const tool = await upload(returning(`{"ok":${nested(10_000)}}`, "brain_tool"))
    const loop = await upload(calling("dispatch", '{"calls":[{"id":"a","name":"deep","input":{}}]}'))
    const created = await request(server().baseUrl, "/v1/sessions", {
      json: {
        agentloop: loop,
        model: { provider: "scripted" },
        environments: [{ name: "w", driver: "brain" }],
        tools: [{ name: "deep", description: "answers deep JSON", module: tool, environment: "w" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const session = created.body.session_id
    const sent = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "go" } } })
    expect(sent.body.turn.status, sent.text).toBe("ended")
    expect(sent.body.turn.result).toEqual([
      { call_id: "a", name: "deep", outcome: "error", output: { message: expect.stringMatching(/nests deeper than 64 levels/) }, is_error: true }
    ])
    const evs = await events(session)
    const started = evs.find((e) => e.kind === "tool_call_started")!
    const ended = evs.find((e) => e.kind === "tool_call_ended")
    expect(ended?.data).toMatchObject({ sequence: started.sequence, outcome: "error", is_error: true })
    expect(ended!.sequence).toBeLessThan(evs.find((e) => e.kind === "activation_ended")!.sequence)
  })

  it("a loop's output nested 10,000 deep fails the turn agentloop_failed, answered and journaled alike; the next turn runs", async () => {
    const loop = await upload(returning(`{"ok":${nested(10_000)}}`))
    const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: loop, model: { provider: "scripted" } } })).body.session_id
    for (const message of ["one", "two"]) {
      const sent = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message } } })
      expect(sent.body.turn, message).toMatchObject({ status: "failed", failure: { code: "agentloop_failed", message: expect.stringMatching(/nests deeper than 64 levels/) } })
      const failed = (await events(session)).filter((e) => e.kind === "turn_failed").at(-1)
      expect(failed?.data, message).toMatchObject({ sequence: sent.body.turn.sequence, failure: { code: "agentloop_failed" } })
    }
  })

  it("an emit whose payload nests 10,000 deep is answered invalid_request, not a crash of the activation", async () => {
    const loop = await upload(calling("emit", `{"kind":"deep","payload":${nested(10_000)}}`))
    const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: loop, model: { provider: "scripted" } } })).body.session_id
    const sent = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "go" } } })
    // The guest returns the answer it got as its error output: the turn fails with that answer's code.
    expect(sent.body.turn).toMatchObject({ status: "failed", failure: { code: "invalid_request", message: expect.stringMatching(/nests deeper than 64 levels/) } })
    expect((await events(session)).filter((e) => e.kind === "deep")).toEqual([])
  })
})

describe("BRAIN_MAX_WASM_MODULE_BYTES below the official loop's size", () => {
  const server = sharedServer({ env: { BRAIN_MAX_WASM_MODULE_BYTES: "20000" } })

  it("the server starts and runs the shipped official loop, which the limit does not bound; an upload above it is still refused 400", async () => {
    const official = fs.statSync(path.join(ROOT, "dist/loops/official.wasm")).size
    expect(official).toBeGreaterThan(20_000)
    const created = await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [{ text: "hi back" }] } } })
    expect(created.status, created.text).toBe(201)
    const sent = await request(server().baseUrl, `/v1/sessions/${created.body.session_id}/messages`, { json: { input: { message: "hi" } } })
    expect(sent.body.turn, sent.text).toMatchObject({ status: "ended" })
    const tooBig = await request(server().baseUrl, "/v1/agentloops", wasm(padded(await helloLoop(), 20_000)))
    expect(tooBig.status).toBe(400)
    expect(tooBig.body.message).toContain("BRAIN_MAX_WASM_MODULE_BYTES")
  })
})

describe("BRAIN_MAX_WASM_MEMORY_BYTES below the official loop's memory at start", () => {
  it("brain serve refuses to start with one line naming the setting and the loop's need: a non-zero exit, not a crash", async () => {
    const official = new Uint8Array(fs.readFileSync(path.join(ROOT, "dist/loops/official.wasm")))
    const needs = moduleLayout(official).memory.limits!.initial * PAGE_BYTES
    expect(needs).toBeGreaterThan(65_536)
    const server = new ServerProcess({ entry: "product", env: { BRAIN_MAX_WASM_MEMORY_BYTES: "65536" } })
    try {
      const r = await server.spawn()
      expect(r.listening, server.output).toBe(false)
      // 1, as other configuration refusals; not 70, a defect's.
      if (!r.listening) expect(r.exited.code, server.output).toBe(1)
      const said = server.output.split("\n").filter((l) => l.includes("BRAIN_MAX_WASM_MEMORY_BYTES"))
      expect(said, server.output).toHaveLength(1)
      expect(said[0]).toContain("official loop")
      expect(said[0]).toContain(`${needs} bytes`)
      expect(server.output).not.toMatch(/FiberFailure|\n\s+at /)
    } finally {
      await server.dispose()
    }
  })
})

// On the main thread, and on a worker thread from its first activation (BRAIN_WASM_INLINE_MS=0):
// there a waiting guest is unwound, and a host call whose suspend buffer grows the memory still
// sends its request whole.
describe.each<[string, Record<string, string>]>([
  ["", {}],
  [", on worker threads", { BRAIN_WASM_INLINE_MS: "0" }]
])("a loop given the whole transcript, with BRAIN_MAX_WASM_IO_BYTES of 256 KiB%s", (_where, env) => {
  const server = sharedServer({ env: { BRAIN_MAX_WASM_IO_BYTES: String(256 * 1024), ...env } })
  const EXAMPLE = path.join(ROOT, "dist/loops/examples/echo-with-memory.wasm")

  it("is never left with a transcript its next input could not carry: the save past the room fails its turn payload_too_large, the transcript stays, and the next turn runs", async () => {
    const id = (await request(server().baseUrl, "/v1/agentloops", wasm(fs.readFileSync(EXAMPLE)))).body.id
    const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: id, model: { provider: "scripted" } } })).body.session_id
    const send = (message: string) => request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message } } })
    // Each turn saves the message and the model's echo of it, about 20 KB for a message of 10 KB,
    // until a save would pass the room (about 176 KB here): that turn fails and saves nothing.
    let saved: unknown
    let refused: { status: string; failure?: { code: string; message: string } } | undefined
    for (let i = 0; i < 12 && refused === undefined; i++) {
      const before = (await request(server().baseUrl, `/v1/sessions/${session}/transcript`)).body
      const turn = (await send("m".repeat(10_000))).body.turn
      if (turn.status === "failed") {
        refused = turn
        saved = before
      }
    }
    expect(refused?.failure?.code).toBe("payload_too_large")
    expect(refused?.failure?.message).toContain("BRAIN_MAX_WASM_IO_BYTES")
    const after = (await request(server().baseUrl, `/v1/sessions/${session}/transcript`)).body
    expect(after, "the transcript as it was").toEqual(saved)
    for (let i = 0; i < 3; i++) {
      const next = await send("hi")
      expect(next.body.turn.status, `turn ${i} after the refusal`).toBe("ended")
    }
    expect((await request(server().baseUrl, `/v1/sessions/${session}/transcript`)).body.messages).toHaveLength(after.messages.length + 6)
  })

  it("a create whose opening transcript the loop could not receive is refused 400 naming transcript; the official loop, which reads the tail, takes it and runs", async () => {
    const id = (await request(server().baseUrl, "/v1/agentloops", wasm(fs.readFileSync(EXAMPLE)))).body.id
    const transcript = [{ role: "user", content: "x".repeat(300 * 1024) }]
    const refused = await request(server().baseUrl, "/v1/sessions", { json: { agentloop: id, model: { provider: "scripted" }, transcript } })
    expect(refused.status).toBe(400)
    expect(refused.body.code).toBe("invalid_request")
    expect(refused.body.details).toEqual([{ path: ["transcript"], message: expect.stringContaining("BRAIN_MAX_WASM_IO_BYTES") }])
    const official = await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" }, transcript } })
    expect(official.status).toBe(201)
    const turn = await request(server().baseUrl, `/v1/sessions/${official.body.session_id}/messages`, { json: { input: { message: "hello" } } })
    expect(turn.body.turn.status).toBe("ended")
  })
})
