/**
 * Hostile uploads against a real server (the sandbox audit): a module naming the host's own
 * exports is refused at upload, and the server goes on answering.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"
import { guest, wat } from "../support/wat.js"

const wasm = (raw: Uint8Array) => ({ raw, headers: { "content-type": "application/wasm" } })

describe("hostile uploads", () => {
  const server = sharedServer()

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
})
