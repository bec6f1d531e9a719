/**
 * Tokens and client lifetimes against a server started with BRAIN_API_TOKEN: a wrong or missing
 * token is a typed 401; `withToken` derives a client with its own token and lifetime and leaves
 * the parent's token as it was. Host tools register their host with the client's token and reach
 * the host's routes with the host's own token; a client whose token is refused registers nothing.
 */
import { Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Brain, BrainClosed, BrainError, tool } from "../../src/sdk/index.js"
import { ensureBuilt, type ServerProcess, startServer } from "../support/server.js"

const TOKEN = "sdk-test-token"
const scripted = { model: { provider: "scripted" as const } }

describe("the Promise client with an API token", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_API_TOKEN: TOKEN } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("a wrong or missing token is refused with a typed 401 unauthorized, never retried", async () => {
    for (const brain of [new Brain({ baseUrl: server.baseUrl, token: "wrong" }), new Brain({ baseUrl: server.baseUrl })]) {
      const refused = await brain.sessions.create(scripted).catch((e) => e)
      expect(refused).toBeInstanceOf(BrainError)
      expect(refused).toMatchObject({ code: "unauthorized", status: 401, retryable: false })
      const listed = await brain.sessions.list().catch((e) => e)
      expect(listed).toMatchObject({ code: "unauthorized", status: 401 })
      await brain.close()
    }
  })

  it("withToken derives a client with its own token and lifetime; the parent keeps its token and stays open", async () => {
    const parent = new Brain({ baseUrl: server.baseUrl, token: "wrong" })
    const child = parent.withToken(TOKEN)
    expect(child).not.toBe(parent)
    const session = await child.sessions.create(scripted)
    expect((await session.send("from the child")).turn.status).toBe("ended")
    expect(parent.options.token).toBe("wrong")
    await expect(parent.sessions.get(session.id)).rejects.toMatchObject({ code: "unauthorized", status: 401 })

    await child.close()
    await expect(child.sessions.get(session.id)).rejects.toBeInstanceOf(BrainClosed)
    // Closing the child did not close the parent: it still reaches the server (and is refused by it).
    expect(parent.closed).toBe(false)
    await expect(parent.sessions.get(session.id)).rejects.toMatchObject({ code: "unauthorized" })

    // Nor does closing the parent close another child.
    const second = parent.withToken(TOKEN)
    await parent.close()
    expect((await second.sessions.get(session.id)).summary.status).toBe("idle")
    await second.close()
  })

  it("a closed client refuses withToken as it refuses every later call: BrainClosed, and no new client", async () => {
    const parent = new Brain({ baseUrl: server.baseUrl, token: TOKEN })
    await parent.close()
    expect(() => parent.withToken(TOKEN)).toThrow(BrainClosed)
  })

  it("host tools: the host registers with the client's API token and serves calls with its own; with a refused token the create is a typed 401 and no host is registered", async () => {
    const echo = tool({ name: "echo", input: Schema.Struct({ q: Schema.Number }), run: ({ q }) => ({ q }) })
    const body = {
      model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name: "echo", input: { q: 7 } }] }, { text: "done" }] },
      tools: [echo]
    }
    const refusedClient = new Brain({ baseUrl: server.baseUrl, token: "wrong" })
    const refused = await refusedClient.sessions.create(body).catch((e) => e)
    expect(refused).toBeInstanceOf(BrainError)
    expect(refused).toMatchObject({ code: "unauthorized", status: 401 })
    expect(await refusedClient.hostId()).toBeUndefined()
    await refusedClient.close()

    const brain = new Brain({ baseUrl: server.baseUrl, token: TOKEN })
    try {
      const session = await brain.sessions.create(body)
      expect((await session.send("go")).turn.status).toBe("ended")
      const ended: Array<unknown> = []
      for await (const e of session.events(0, { live: false })) if (e.kind === "tool_call_ended") ended.push(e.data)
      expect(ended).toEqual([expect.objectContaining({ outcome: "ok", output: { q: 7 } })])
    } finally {
      await brain.close()
    }
  })
})
