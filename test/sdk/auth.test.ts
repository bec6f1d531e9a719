/**
 * Tokens and client lifetimes against a server started with BRAIN_API_TOKEN: a wrong or missing
 * token is a typed 401; `withToken` derives a client with its own token and lifetime and leaves
 * the parent's token as it was.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Brain, BrainClosed, BrainError } from "../../src/sdk/index.js"
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
})
