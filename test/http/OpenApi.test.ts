import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { statusOf } from "../../src/http/Errors.js"
import { openApiDocument } from "../../src/http/OpenApiDoc.js"
import type { FailureCode } from "../../src/domain/Failure.js"

/** Statuses the listener answers any request with, before routing (Connections.ts): each `invalid_request`. */
const LISTENER_STATUSES = ["408", "417", "431"]

describe("OpenAPI document", () => {
  it("the committed docs/openapi.json is exactly what the contract generates (run `npm run openapi` after changing the API)", () => {
    const committed = JSON.parse(fs.readFileSync(new URL("../../docs/openapi.json", import.meta.url), "utf8"))
    expect(committed).toEqual(JSON.parse(JSON.stringify(openApiDocument())))
  })

  it("the page routes' limit states its range and its default (100 sessions, 1000 Events), as the handlers apply them, and that a stream is not paged by it", () => {
    const doc = openApiDocument() as any
    const limitOf = (p: string) => doc.paths[p].get.parameters.find((x: { name: string }) => x.name === "limit")
    expect(limitOf("/v1/sessions").description).toBe("the page size: a whole number from 1 to 1000 (default 100)")
    expect(limitOf("/v1/sessions/{id}/events").description).toBe(
      "the page size: a whole number from 1 to 1000 (default 1000); an SSE stream (`Accept: text/event-stream`) checks it and sends every Event, unpaged"
    )
  })

  it("documents every route of DESIGN §7, the host routes included, with the Error body on every error status", () => {
    const doc = openApiDocument() as any
    expect(doc.openapi).toBe("3.1.0")
    const routes = Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops as object).map((m) => `${m.toUpperCase()} ${p}`))
    expect(routes.sort()).toEqual([
      "DELETE /v1/agentloops/{id}",
      "DELETE /v1/hosts/{id}",
      "DELETE /v1/sessions/{id}",
      "GET /health/live",
      "GET /health/ready",
      "GET /v1/agentloops",
      "GET /v1/hosts/{id}/commands",
      "GET /v1/sessions",
      "GET /v1/sessions/{id}",
      "GET /v1/sessions/{id}/events",
      "GET /v1/sessions/{id}/transcript",
      "POST /v1/agentloops",
      "POST /v1/hosts",
      "POST /v1/hosts/{id}/events",
      "POST /v1/hosts/{id}/results",
      "POST /v1/sessions",
      "POST /v1/sessions/{id}/cancel",
      "POST /v1/sessions/{id}/end",
      "POST /v1/sessions/{id}/messages"
    ])
    const send = doc.paths["/v1/sessions/{id}/messages"].post
    expect(Object.keys(send.responses).sort()).toEqual(["200", "202", "400", "401", "404", "408", "409", "413", "415", "417", "431", "500", "503"])
  })

  it("each error status lists, by schema and in its description, only the codes answered with that status (the listener's 408, 417 and 431 are `invalid_request`); no framework error shape is documented", () => {
    const doc = openApiDocument() as any
    expect(Object.keys(doc.components.schemas)).not.toContain("HttpApiDecodeError")
    const codeOf = (ref: string) => doc.components.schemas[ref.replace("#/components/schemas/", "")].properties.code.enum[0] as FailureCode
    let statuses = 0
    for (const operations of Object.values<any>(doc.paths)) {
      for (const operation of Object.values<any>(operations)) {
        for (const [status, response] of Object.entries<any>(operation.responses)) {
          if (Number(status) < 400) continue
          const schema = response.content["application/json"].schema
          const codes = (schema.anyOf ?? [schema]).map((s: { $ref: string }) => codeOf(s.$ref))
          for (const code of codes) {
            if (LISTENER_STATUSES.includes(status)) expect(code, `${code} under ${status}`).toBe("invalid_request")
            else expect(statusOf(code), `${code} under ${status}`).toBe(Number(status))
          }
          expect(response.description.startsWith(`code ${codes.map((c: string) => `\`${c}\``).join(", ")}`), response.description).toBe(true)
          for (const schemaRef of schema.anyOf ?? [schema]) {
            const body = doc.components.schemas[schemaRef.$ref.replace("#/components/schemas/", "")]
            expect(Object.keys(body.properties).sort()).toEqual(["code", "details", "message", "retryable"])
            expect(body.required.sort()).toEqual(["code", "message", "retryable"])
          }
          statuses++
        }
      }
    }
    expect(statuses).toBeGreaterThan(50)
  })
})
