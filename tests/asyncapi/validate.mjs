// Parses an AsyncAPI document with the official parser (@asyncapi/parser) and exits non-zero on any error.
// Usage: node validate.mjs path/to/asyncapi.json
// Prints every diagnostic to stderr; on success prints a JSON summary (channels, messages, operations) to stdout.
import { readFileSync } from 'node:fs';
import { Parser } from '@asyncapi/parser';

const file = process.argv[2];
if (!file) {
  console.error('usage: node validate.mjs ASYNCAPI_FILE');
  process.exit(2);
}

const severities = ['error', 'warning', 'information', 'hint'];
const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(file, 'utf8'), { source: file });
for (const d of diagnostics) {
  console.error(`${severities[d.severity] ?? d.severity} ${d.code} at /${d.path.join('/')}: ${d.message}`);
}
const errors = diagnostics.filter((d) => d.severity === 0);
if (!document || errors.length > 0) {
  console.error(`${file}: ${errors.length} error(s)`);
  process.exit(1);
}

const messages = document.allMessages().all().map((m) => m.id());
const summary = {
  version: document.version(),
  channels: document.channels().all().map((c) => ({ id: c.id(), address: c.address(), messages: c.messages().all().map((m) => m.id()) })),
  operations: document.operations().all().map((o) => ({ id: o.id(), action: o.action() })),
  messages,
  schemaFormats: Object.fromEntries(document.allMessages().all().map((m) => [m.id(), m.schemaFormat() ?? null])),
  correlationIds: document.allMessages().all().map((m) => m.correlationId()?.location() ?? null),
  sensitive: document.allMessages().all().flatMap((m) => Object.entries(m.payload()?.properties() ?? {}).filter(([, s]) => s.json()?.['x-sensitive'] === true).map(([name]) => `${m.id()}:${name}`)),
};
console.log(JSON.stringify(summary));
