/**
 * Hostile uploads against a real server (the sandbox audit): a module naming the host's own
 * exports, a module of huge tables, a loop of bulk memory operations. Each is refused at upload or
 * stopped at its bound, and the server goes on answering. No assertion is timed: where the main
 * thread's freedom is the point, the test asserts an order (a request sent while a turn runs is
 * answered before the turn ends).
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { TWIN_FORMAT } from "../../src/layers/wasm/TwinExports.js"
import { eventually, request, sharedServer, sleep } from "../support/server.js"
import { data, guest, wat } from "../support/wat.js"

const wasm = (raw: Uint8Array) => ({ raw, headers: { "content-type": "application/wasm" } })

describe("hostile uploads", () => {
  const server = sharedServer({ env: { BRAIN_MAX_WASM_COMPUTE_MS: "1000" } })

  const stored = async () => (await request(server().baseUrl, "/v1/agentloops")).body.agentloops as ReadonlyArray<{ readonly id: string }>

  /** The server still serves: /health/live answers, and a session of the official loop ends a turn. */
  const serves = async () => {
    expect((await request(server().baseUrl, "/health/live")).status).toBe(204)
    const session = (await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [{ text: "hi" }] } } })).body.session_id
    const turn = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "still there?" } } })
    expect(turn.body.turn.status).toBe("ended")
  }

  it("a module exporting a name in the host's namespace (brain$written, brain$save, brain$restore) is refused at upload, naming it, as a loop and as a tool: nothing is stored", async () => {
    const before = await stored()
    for (const entry of ["brain_run", "brain_tool"]) {
      for (const field of [
        `(global (export "brain$written") i32 (i32.const 0))`,
        `(func (export "brain$save")) (func (export "brain$restore"))`
      ]) {
        const bytes = await wat(guest(`${field} (func (export "${entry}") (param i32 i32) (result i64) (i64.const 0))`))
        const refused = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
        expect(refused.status, refused.text).toBe(400)
        expect(refused.body.code).toBe("invalid_request")
        expect(refused.body.message).toMatch(/exports brain\$(written|save): names starting with brain\$ are reserved for the host/)
      }
    }
    expect(await stored()).toEqual(before)
    await serves()
  })

  it("a module of thirteen tables of 10,000,000 entries (308 bytes) is refused at upload, naming its tables, and the server serves on", async () => {
    const tables = Array.from({ length: 13 }, (_, i) => `(table $t${i} 10000000 funcref)`).join(" ")
    const ok = data(100, '{"ok":1}')
    for (const declared of [tables, tables.replaceAll("10000000 funcref", "10000000 10000000 funcref")]) {
      const bytes = await wat(guest(`${ok.segment} ${declared} (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`), { reference_types: true })
      const refused = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
      expect(refused.status, refused.text).toBe(400)
      expect(refused.body.message).toMatch(/declares no maximum|entries in all/)
    }
    await serves()
  })

  it("a loop of memory.fill on the main thread is stopped at its compute budget, and the server answers meanwhile: /health/live, asked while the turn runs, is answered before the turn ends", async () => {
    const done = data(100, '{"ok":"filled"}')
    // 2,500 fills of 96 MiB: seconds of writing (far more than the budget, even at the speed of
    // memory), in far fewer loop iterations than one allowance of fuel. Its memory grows to fit
    // first (a memory that large at start costs its instantiation time, and the main thread's
    // first clock read would move it before any fill).
    const bytes = await wat(guest(`${done.segment}
      (func (export "brain_run") (param i32 i32) (result i64) (local $i i32)
        (drop (memory.grow (i32.const 1537)))
        (block $end (loop $l
          (br_if $end (i32.ge_u (local.get $i) (i32.const 2500)))
          (memory.fill (i32.const 65536) (local.get $i) (i32.const ${96 << 20}))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $l)))
        (call $out (i32.const ${done.ptr}) (i32.const ${done.len})))`))
    const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(bytes))
    expect(admitted.status, admitted.text).toBe(201)
    // Its twin (the main thread's) is made in the background and kept: the turn runs on the main thread once it is.
    const twin = path.join(server().dataDir, "agentloops", "twins", `${admitted.body.id}.v${TWIN_FORMAT}.wasm`)
    await eventually("the twin is kept", async () => (fs.existsSync(twin) ? true : undefined))
    const session = (await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" } } })).body.session_id
    const order: Array<string> = []
    const turn = request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "fill" } } }).then((reply) => {
      order.push("turn")
      return reply
    })
    await sleep(200)
    const live = await request(server().baseUrl, "/health/live")
    order.push("live")
    expect(live.status).toBe(204)
    const ended = await turn
    expect(ended.body.turn.status).toBe("failed")
    expect(ended.body.turn.failure).toMatchObject({ code: "agentloop_failed" })
    expect(ended.body.turn.failure.message).toMatch(/compute budget of 1000 ms/)
    expect(order).toEqual(["live", "turn"])
    await serves()
  })
})
