/**
 * A fetch that injects the network's faults into chosen requests, for the SDK's retry tests
 * against a real server: an answer lost after the server sent it, a connection dropped while the
 * request still runs on the server, a connection refused before anything was sent, or an answer
 * made up without sending (a proxy's, a loaded server's). Every request is recorded as sent.
 */
import type { Fetch } from "../../src/sdk/index.js"
import { freePort, type Sent, sentOf } from "./support.js"

export type Fault =
  /** The request reaches the server and is answered in full; the answer is then lost. */
  | { readonly kind: "lose-answer" }
  /** The request reaches the server; the connection drops `afterMs` later, the request still running there. */
  | { readonly kind: "drop-while-running"; readonly afterMs: number }
  /** The connection is refused: nothing reaches the server (a real refusal, from a closed port). */
  | { readonly kind: "refuse-connection" }
  /** Answered here, without sending. */
  | { readonly kind: "answer"; readonly answer: () => Response }

interface Rule {
  readonly match: (s: Sent) => boolean
  readonly fault: Fault
  left: number
}

export class FaultyFetch {
  readonly sent: Array<Sent> = []
  /** The answers the server gave to requests whose connection this fetch dropped, as text. */
  readonly answersBehind: Array<Promise<{ readonly status: number; readonly text: string }>> = []
  private readonly rules: Array<Rule> = []

  /** The next `times` requests `match` accepts meet `fault`. */
  inject(match: (s: Sent) => boolean, fault: Fault, times = 1): this {
    this.rules.push({ match, fault, left: times })
    return this
  }

  readonly fetch: Fetch = async (url, init) => {
    const sent = sentOf(url, init)
    this.sent.push(sent)
    const rule = this.rules.find((r) => r.left > 0 && r.match(sent))
    if (rule === undefined) return globalThis.fetch(url, init)
    rule.left--
    switch (rule.fault.kind) {
      case "answer":
        return rule.fault.answer()
      case "refuse-connection":
        return globalThis.fetch(`http://127.0.0.1:${await freePort()}/`, { method: "GET" })
      case "lose-answer": {
        const response = await globalThis.fetch(url, init)
        await response.arrayBuffer()
        throw new TypeError("fetch failed (the test lost the answer after the server sent it)")
      }
      case "drop-while-running": {
        // Sent without the caller's signal: the caller's side of the connection is what drops.
        const { signal: _signal, ...rest } = init
        this.answersBehind.push(globalThis.fetch(url, rest).then(async (r) => ({ status: r.status, text: await r.text() })))
        await new Promise((resolve) => setTimeout(resolve, rule.fault.kind === "drop-while-running" ? rule.fault.afterMs : 0))
        throw new TypeError("fetch failed (the test dropped the connection while the request ran)")
      }
    }
  }

  /** The requests `match` accepts, as sent. */
  requests(match: (s: Sent) => boolean): Array<Sent> {
    return this.sent.filter(match)
  }
}

/** This fetch as the `fetch` FetchHttpClient calls (with a URL or a Request, not a URL's text). */
export const asGlobalFetch = (fetch: Fetch): typeof globalThis.fetch =>
  ((input: string | URL | { readonly url: string }, init?: RequestInit) =>
    fetch(input instanceof URL ? input.href : typeof input === "string" ? input : input.url, init ?? {})) as typeof globalThis.fetch

export const isPost = (suffix: string) => (s: Sent) => s.method === "POST" && new URL(s.url).pathname.endsWith(suffix)
