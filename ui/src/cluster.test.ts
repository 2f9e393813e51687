import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks } from '@tauri-apps/api/mocks';
import { ClusterSection, clusterNotes, parseHosts, rankLines } from './clusterSection';
import type { ClusterStatus } from './bindings/ClusterStatus';
import type { Settings } from './bindings/Settings';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const status = (over: Partial<ClusterStatus> = {}): ClusterStatus => ({
  enabled: true, state: 'joined', hostfile_path: '/data/cluster-hostfile.json', error: null, model_id: 'dir:tiny', restart_needed: false,
  ranks: [
    { rank: 0, addresses: ['10.0.0.1:5000'], this_mac: true, state: over.state ?? 'joined' },
    { rank: 1, addresses: ['10.0.0.2:5000'], this_mac: false, state: over.state ?? 'joined' },
  ],
  ...over,
});

describe('cluster setting', () => {
  it('reads one host a line, leaving out blank lines', () => {
    expect(parseHosts(' 10.0.0.1:5000\n\n10.0.0.2:5000 \n')).toEqual(['10.0.0.1:5000', '10.0.0.2:5000']);
    expect(parseHosts('')).toEqual([]);
  });

  it('says a line per rank: this Mac first, the others by address', () => {
    expect(rankLines(status()).map((l) => l.text)).toEqual([
      'Rank 0 · this Mac — joined',
      'Rank 1 · 10.0.0.2:5000 — joined',
    ]);
    expect(rankLines(status({ state: 'waiting' }))[1].text).toBe('Rank 1 · 10.0.0.2:5000 — waiting to join…');
  });

  it('a lost ring says rank 0 cannot tell which, the error, and to restart', () => {
    const lost = status({ state: 'lost', restart_needed: true, error: { code: 'DISTRIBUTED_ERROR', message: 'distributed: another rank of the split model failed' } });
    const notes = clusterNotes(lost);
    expect(notes[0]).toContain('cannot tell which');
    expect(notes[1]).toContain('another rank of the split model failed');
    expect(notes[2]).toContain('quit and reopen the app');
    expect(clusterNotes(status())).toEqual([]);
  });

  it('edits the draft and shows the lines with their state', () => {
    const draft = { cluster: { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120 } } as unknown as Settings;
    const saves: boolean[] = [];
    const section = new ClusterSection(() => draft, (soon) => saves.push(soon));
    document.body.append(section.el);
    const toggle = section.el.querySelector<HTMLInputElement>('[data-testid=setting-cluster-enabled]')!;
    toggle.checked = true;
    toggle.dispatchEvent(new Event('change'));
    const hosts = section.el.querySelector<HTMLTextAreaElement>('[data-testid=setting-cluster-hosts]')!;
    hosts.value = '10.0.0.1:5000\n10.0.0.2:5000\n';
    hosts.dispatchEvent(new Event('input'));
    expect(draft.cluster).toMatchObject({ enabled: true, hosts: ['10.0.0.1:5000', '10.0.0.2:5000'] });
    expect(saves).toEqual([false, true]);

    section.render(status({ state: 'lost', error: { code: 'DISTRIBUTED_ERROR', message: 'lost' } }));
    const rank1 = section.el.querySelector<HTMLElement>('[data-testid=cluster-rank-1]')!;
    expect(rank1.dataset.state).toBe('lost');
    expect(rank1.textContent).toBe('Rank 1 · 10.0.0.2:5000 — lost');
    expect(section.el.querySelectorAll('[data-testid=cluster-note]').length).toBe(2);
    // off and never joined: no lines
    section.render(status({ enabled: false, state: 'not_joined' }));
    expect(section.el.querySelectorAll('li').length).toBe(0);
  });
});
