/**
 * The settings the connection guard gives Node (src/http/Connections.ts): checked on the server
 * object rather than timed on a wire, since what a timer does is the e2e tests' (closed by which
 * timer, by the server's word: test/e2e/connectionBounds.test.ts).
 */
import * as http from "node:http"
import { describe, expect, it } from "@effect/vitest"
import { guardConnections, NODE_KEEP_ALIVE_BUFFER_MS } from "../../src/http/Connections.js"

const LIMITS = { maxConnections: 10, headersTimeoutMs: 1_000, requestTimeoutMs: 3_000, keepAliveTimeoutMs: 2_500, responseStallMs: 0 }

describe("the connection guard's settings", () => {
  it("an idle keep-alive connection is given the setting less Node's own buffer, so that it closes at BRAIN_KEEP_ALIVE_TIMEOUT_MS, not a second later", () => {
    const server = http.createServer()
    guardConnections(server, LIMITS)
    expect(server.keepAliveTimeout + NODE_KEEP_ALIVE_BUFFER_MS).toBe(LIMITS.keepAliveTimeoutMs)
  })

  it("the request timeout Node is given is never below the headers' (both count from the request's first byte)", () => {
    const server = http.createServer()
    guardConnections(server, { ...LIMITS, requestTimeoutMs: 500 })
    expect(server.headersTimeout).toBe(LIMITS.headersTimeoutMs)
    expect(server.requestTimeout).toBe(LIMITS.headersTimeoutMs)
  })
})
