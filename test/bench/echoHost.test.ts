/**
 * The benchmark's echo host (scripts/bench/lib.js) survives its command stream being reset: a
 * dropped connection ends the host quietly (its `ended` resolves) instead of an unhandled 'error'
 * ending the benchmark's process. Against a stand-in server that registers the host, opens its
 * stream and then resets the socket.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
// @ts-expect-error: a plain JavaScript module of the benchmark harness, without types.
import { echoHost } from "../../scripts/bench/lib.js"

describe("the benchmark's echo host", () => {
  it("a command stream reset by the server ends the host quietly (ended resolves): no unhandled error", async () => {
    const server = http.createServer((req, res) => {
      if (req.method === "POST" && req.url === "/v1/hosts") {
        req.resume()
        res.writeHead(201, { "content-type": "application/json" })
        return res.end(JSON.stringify({ host_id: "host_test", token: "t" }))
      }
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.write("event: ready\ndata: {\"heartbeat_ms\":0}\n\n")
      // Mid-stream, the connection is reset.
      setTimeout(() => res.socket?.resetAndDestroy(), 20)
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const errors: Array<unknown> = []
    const onError = (e: unknown) => void errors.push(e)
    process.on("uncaughtException", onError)
    try {
      const host = await echoHost((server.address() as AddressInfo).port)
      expect(host.ended).toBeInstanceOf(Promise)
      await host.ended
      await new Promise((resolve) => setTimeout(resolve, 50))
      expect(errors).toEqual([])
      expect(host.counts()).toEqual({ answered: 0, refused: 0 })
      host.close()
    } finally {
      process.off("uncaughtException", onError)
      server.close()
    }
  })
})
