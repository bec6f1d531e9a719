#!/usr/bin/env node
// Writes docs/openapi.json from the compiled contract: `npm run openapi`. A test fails when the
// committed copy differs from what the contract generates.
import * as fs from "node:fs"
import { openApiDocument } from "../dist/http/OpenApiDoc.js"

const out = new URL("../docs/openapi.json", import.meta.url)
fs.writeFileSync(out, JSON.stringify(openApiDocument(), null, 2) + "\n")
console.log(`wrote ${out.pathname}`)
