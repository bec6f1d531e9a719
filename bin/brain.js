#!/usr/bin/env node
// The operator CLI. It runs the compiled build; `npm run build` produces dist/.
import "../dist/cli/main.js"
