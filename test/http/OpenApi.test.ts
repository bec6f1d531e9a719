import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { openApiDocument } from "../../src/http/OpenApiDoc.js"

describe("OpenAPI document", () => {
  it("the committed docs/openapi.json is exactly what the contract generates (run `npm run openapi` after changing the API)", () => {
    const committed = JSON.parse(fs.readFileSync(new URL("../../docs/openapi.json", import.meta.url), "utf8"))
    expect(committed).toEqual(JSON.parse(JSON.stringify(openApiDocument())))
  })

  it("documents every route of DESIGN §7, the host routes included, with the Error body on every error status", () => {
    const doc = openApiDocument() as any
    expect(doc.openapi).toBe("3.1.0")
    const routes = Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops as object).map((m) => `${m.toUpperCase()} ${p}`))
    expect(routes.sort()).toEqual([
      "DELETE /v1/agentloops/{id}",
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
    expect(Object.keys(send.responses).sort()).toEqual(["200", "202", "400", "401", "404", "409", "413", "415", "500", "503"])
  })
})
