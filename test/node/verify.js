// verify.js: checks one jobflow callback with the standardwebhooks reference
// library, as a receiver would.  Input on stdin: {"secret", "headers",
// "body_b64"}.  Prints the verified payload (JSON) or the error, and exits
// 0 or 1.
"use strict";
const { Webhook } = require("standardwebhooks");

let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const req = JSON.parse(input);
  const body = Buffer.from(req.body_b64, "base64").toString("utf8");
  try {
    const payload = new Webhook(req.secret).verify(body, req.headers);
    process.stdout.write(JSON.stringify({ ok: true, payload }) + "\n");
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(e && e.message) }) + "\n");
    process.exit(1);
  }
});
