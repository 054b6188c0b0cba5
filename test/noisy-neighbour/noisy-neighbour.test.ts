// The noisy-neighbour suite (DESIGN I11): each attack of a hostile tenant or a stranger, against a colocated server and
// a disaggregated cluster, while another tenant's short requests are timed. Each must still succeed, with a median
// latency within BOUND_FACTOR × (its median beside an equal benign load) + BOUND_SLACK_MS, and the gateway process's
// memory must grow by less than RSS_GROWTH_MAX_MB during the attack. Figures are printed as test diagnostics.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestCluster } from '../disagg/cluster-helpers.js';
import { tokens } from '../serving/isolation-suite.js';
import { startTestServer, writeKeyFile } from '../serving/serve-helpers.js';
import { probeLatency, tenantLoad } from '../serving/tenant-load.js';
import { ATTACKS, type AttackTarget } from './attacks.js';

const BOUND_FACTOR = 3;
const BOUND_SLACK_MS = 300;
const RSS_GROWTH_MAX_MB = 200;
const PROBES = 7;
const PROBE_PROMPT = tokens(8, 5);
const PROBE_TOKENS = 8;

const LIMITS = {
  calm: { concurrentRequestsMax: 8, kvPagesMax: 48 },
  flood: { concurrentRequestsMax: 8, kvPagesMax: 48 },
};

interface Deployment extends AttackTarget {
  close(): Promise<void>;
}

const deployments: [string, () => Promise<Deployment>][] = [
  [
    'colocated',
    async () => {
      const s = await startTestServer({ apiKeysPath: writeKeyFile(['calm', 'flood', 'probe'], LIMITS) });
      return { url: s.url, workerPorts: [], close: () => s.close() };
    },
  ],
  [
    'disaggregated',
    async () => {
      const c = await startTestCluster({ serve: { apiKeysPath: writeKeyFile(['calm', 'flood', 'probe'], LIMITS) } });
      const ports = c.workers.flatMap((w) => [w.control, ...(w.transfer !== undefined ? [w.transfer] : [])]);
      return { url: c.url, workerPorts: ports, close: () => c.close() };
    },
  ],
];

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const [label, start] of deployments) {
  describe(`noisy neighbours, ${label}`, () => {
    let server: Deployment;
    let benign = 0;
    before(async () => {
      server = await start();
      // the baseline: the probe beside a well-behaved tenant's steady load
      const calm = tenantLoad(server, 'calm', 2, tokens(150, 3), 90, 10);
      await pause(300);
      benign = await probeLatency(server, 'probe', PROBE_PROMPT, PROBE_TOKENS, PROBES);
      await calm.stop();
    });
    after(async () => {
      await server?.close();
    });

    for (const attack of ATTACKS) {
      test(attack.name, async (t) => {
        const rssBefore = process.memoryUsage().rss;
        const running = await attack.start(server, 'flood');
        await pause(300);
        const attacked = await probeLatency(server, 'probe', PROBE_PROMPT, PROBE_TOKENS, PROBES);
        const growthMb = (process.memoryUsage().rss - rssBefore) / (1 << 20);
        const seen = await running.stop();
        t.diagnostic(
          `${label}, ${attack.name}: probe median ${attacked.toFixed(0)} ms vs ${benign.toFixed(0)} ms beside benign ` +
            `load (${(attacked / benign).toFixed(2)}x); gateway RSS +${growthMb.toFixed(0)} MB; attacker: ${seen}`,
        );
        assert.ok(
          attacked <= BOUND_FACTOR * benign + BOUND_SLACK_MS,
          `probe median ${attacked.toFixed(0)} ms under attack, ${benign.toFixed(0)} ms beside benign load`,
        );
        assert.ok(growthMb < RSS_GROWTH_MAX_MB, `gateway memory grew ${growthMb.toFixed(0)} MB`);
      });
    }
  });
}
