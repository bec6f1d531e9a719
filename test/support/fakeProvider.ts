/**
 * A fake model provider on loopback for tests: it records every request (method, path, headers,
 * JSON body) and answers each with a script — a status, headers, and raw body chunks written as
 * given (so an SSE event can be split anywhere), with pauses, a cut connection or a stall.
 *
 *   const fake = await FakeProvider.start((req) => ({ chunks: ["data: {...}\n\n", { pauseMs: 50 }, ...] }))
 *   … point a binding's base_url at fake.url …
 *   fake.requests[0].body   // what the provider was sent
 *   await fake.close()
 */
import * as http from "node:http"
import type * as net from "node:net"

export interface RecordedRequest {
  readonly method: string
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  /** The body parsed as JSON (undefined when it is not JSON). */
  readonly body: any
  readonly text: string
}

export type Step =
  /** Raw text written as one chunk. */
  | string
  /** Raw bytes written as one chunk (an encoded body, say). */
  | Uint8Array
  /** Waits before the next step. */
  | { readonly pauseMs: number }
  /** Destroys the connection (a cut mid-stream). */
  | { readonly cut: true }
  /** Sends nothing more and keeps the connection open until the client goes (a stall). */
  | { readonly stall: true }

export interface Script {
  /**
   * Informational responses sent before the final one, in order: `103` (Early Hints, with a
   * `link` header) or `100` (Continue, unasked for: Brain never sends `Expect`).
   */
  readonly informational?: ReadonlyArray<100 | 103>
  readonly status?: number
  readonly headers?: Readonly<Record<string, string>>
  readonly steps: ReadonlyArray<Step>
}

export type Handler = (request: RecordedRequest, index: number) => Script | Promise<Script>

/** SSE text for one event: `event:` (when given) and `data:` lines, then a blank line. */
export const sse = (data: unknown, event?: string) =>
  `${event !== undefined ? `event: ${event}\n` : ""}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export class FakeProvider {
  readonly requests: Array<RecordedRequest> = []
  private readonly sockets = new Set<net.Socket>()
  /** Connections accepted since it started. */
  connections = 0
  private constructor(private readonly server: http.Server, readonly url: string) {}

  static start(handler: Handler): Promise<FakeProvider> {
    const server = http.createServer()
    return new Promise((resolve) => {
      server.listen(0, "127.0.0.1", () => {
        const address = server.address() as net.AddressInfo
        const fake = new FakeProvider(server, `http://127.0.0.1:${address.port}`)
        server.on("connection", (socket) => {
          fake.sockets.add(socket)
          fake.connections++
          socket.on("close", () => fake.sockets.delete(socket))
        })
        server.on("request", (req, res) => void fake.answer(handler, req, res))
        resolve(fake)
      })
    })
  }

  private async answer(handler: Handler, req: http.IncomingMessage, res: http.ServerResponse) {
    const chunks: Array<Buffer> = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const text = Buffer.concat(chunks).toString("utf8")
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      body = undefined
    }
    const recorded: RecordedRequest = { method: req.method ?? "", path: req.url ?? "", headers: req.headers, body, text }
    this.requests.push(recorded)
    const script = await handler(recorded, this.requests.length - 1)
    for (const status of script.informational ?? []) {
      if (status === 100) res.writeContinue()
      else res.writeEarlyHints({ link: "</style.css>; rel=preload; as=style" })
    }
    res.writeHead(script.status ?? 200, { "content-type": "text/event-stream", ...script.headers })
    res.flushHeaders()
    for (const step of script.steps) {
      if (res.destroyed) return
      if (typeof step === "string" || step instanceof Uint8Array) res.write(step)
      else if ("pauseMs" in step) await sleep(step.pauseMs)
      else if ("cut" in step) return void req.socket.destroy()
      else return // a stall: nothing more, the connection stays open
    }
    res.end()
  }

  /** Connections open now (a cancelled call's connection is closed by the client). */
  get openConnections(): number {
    return this.sockets.size
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}
