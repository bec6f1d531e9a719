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
  /**
   * The request reaches the server; the connection drops `afterMs` later, or once `when` settles
   * (the test has seen the request take effect), the request still running there.
   */
  | { readonly kind: "drop-while-running"; readonly afterMs: number }
  | { readonly kind: "drop-while-running"; readonly when: () => Promise<unknown> }
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
  /**
   * The answers the server gave to requests sent through without a fault, in the order they came:
   * their status, and their text once read (none for an event stream, which may not end).
   */
  readonly answered: Array<{ readonly sent: Sent; readonly status: number; readonly text: Promise<string> | undefined }> = []
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
    if (rule === undefined) {
      const response = await globalThis.fetch(url, init)
      const streamed = (response.headers.get("content-type") ?? "").startsWith("text/event-stream")
      this.answered.push({ sent, status: response.status, text: streamed ? undefined : response.clone().text() })
      return response
    }
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
        const fault = rule.fault
        await ("when" in fault ? fault.when() : new Promise((resolve) => setTimeout(resolve, fault.afterMs)))
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
