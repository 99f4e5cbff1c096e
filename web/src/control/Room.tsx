// A room's tile: its counters, sparkline, phase and mode, the settings form, the events
// (Events.tsx), pause and resume, and the confirmed flush.
import { useEffect, useRef, useState } from 'preact/hooks';
import { Api, ApiError, buildPatch, fieldMessage, type RoomView, type Settings } from './api';
import { EventsPanel } from './Events';
import { ModeSwitch, PhaseBadge } from './Mode';
import {
  formatAdaptive,
  formatAge,
  formatBreaker,
  formatCount,
  formatDuration,
  formatEta,
  formatInflight,
  formatRate,
  plural,
} from './format';
import { describeHistory, sparkline, WINDOW_MS, type Sample } from './sparkline';
import { SettingsEditor } from './Settings';
import { auditNote, slug, type Notice } from './ui';

/** Statistics older than this are marked stale on the tile. */
const STALE_SECS = 5;

export function RoomTile(props: {
  index: number;
  room: RoomView;
  samples: Sample[];
  now: number;
  api: Api;
  stale: boolean;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { room: r, api, onUnauthorized, refresh } = props;
  const id = slug(r.room, props.index);
  const [notice, setNotice] = useState<Notice | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  /** What a pause/resume just set, shown until the polled statistics agree (≤ 5 s). */
  const [expectPaused, setExpectPaused] = useState<{ value: boolean; until: number } | null>(null);
  const [flushOpen, setFlushOpen] = useState(false);

  const fail = (err: unknown, what: string) => {
    const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
    if (e.unauthorized) onUnauthorized(e);
    else setNotice({ kind: 'error', text: `${what} failed: ${e.message}` });
  };

  const paused =
    expectPaused && props.now < expectPaused.until && r.paused !== expectPaused.value ? expectPaused.value : r.paused;

  const togglePause = async () => {
    const pausing = !paused;
    setBusy('pause');
    setNotice(null);
    try {
      const res = pausing ? await api.pause(r.room) : await api.resume(r.room);
      setExpectPaused({ value: res.paused, until: Date.now() + 5000 });
      setNotice({
        kind: 'ok',
        text: (res.paused ? 'Paused: nobody is admitted until you resume.' : 'Resumed: admitting again.') + auditNote(res.audit),
      });
      refresh();
    } catch (err) {
      fail(err, pausing ? 'Pause' : 'Resume');
    } finally {
      setBusy(null);
    }
  };

  if (!r.stats_available) {
    return (
      <section class="cr-tile" aria-labelledby={`${id}-name`} data-room={r.room}>
        <header class="cr-tile-head">
          <h3 id={`${id}-name`}>{r.room}</h3>
        </header>
        <p class="cr-muted">No statistics yet: the queue store has not answered since this replica started.</p>
      </section>
    );
  }

  const ageSecs = r.stats_age_secs ?? 0;
  const staleStats = props.stale || ageSecs > STALE_SECS;
  const max = r.max_active ?? 0;
  const active = r.active ?? 0;
  const fill = max > 0 ? Math.min(1, active / max) : 0;
  const eta = formatEta(r.eta);
  const inflight = formatInflight(r.inflight);
  const breaker = formatBreaker(r.max_waiting, r.waiting);

  return (
    <section
      class={`cr-tile${paused ? ' cr-tile-paused' : ''}${staleStats ? ' cr-tile-stale' : ''}`}
      aria-labelledby={`${id}-name`}
      data-room={r.room}
    >
      <header class="cr-tile-head">
        <h3 id={`${id}-name`}>{r.room}</h3>
        <PhaseBadge phase={r.phase === 'paused' ? undefined : r.phase} />
        {paused && (
          <span class="cr-badge cr-badge-paused" data-testid="paused-badge">
            Paused
          </span>
        )}
        {staleStats && <span class="cr-badge cr-badge-stale">Stale</span>}
        <span class="cr-tile-age cr-muted">stats {formatAge(ageSecs)} old</span>
      </header>
      <dl class="cr-stats">
        <div class="cr-stat">
          <dt>Waiting</dt>
          <dd class="cr-big" data-stat="waiting">
            {formatCount(r.waiting)}
          </dd>
        </div>
        <div class="cr-stat">
          <dt>On the site</dt>
          <dd class="cr-big" data-stat="active">
            {formatCount(active)}
            <span class="cr-of"> / {formatCount(max)}</span>
          </dd>
          <div class={`cr-meter${fill >= 0.9 ? ' cr-meter-hot' : ''}`} aria-hidden="true">
            <div style={{ width: `${(fill * 100).toFixed(1)}%` }} />
          </div>
        </div>
        <div class="cr-stat">
          <dt>Admitted / s</dt>
          <dd class="cr-big" data-stat="observed_rate">
            {formatRate(r.observed_rate)}
          </dd>
          <dd class="cr-sub">limit {formatRate(r.rate)}/s</dd>
          {formatAdaptive(r) && (
            <dd class="cr-sub cr-adaptive" data-stat="effective_rate">
              ({formatAdaptive(r)})
            </dd>
          )}
        </div>
        <div class="cr-stat">
          <dt>Refused</dt>
          <dd class="cr-big" data-stat="refused">
            {formatCount(r.total_refused)}
          </dd>
        </div>
      </dl>
      <Sparkline id={id} samples={props.samples} now={props.now} />
      <p class="cr-totals cr-muted">
        joined {formatCount(r.total_joined)} · admitted {formatCount(r.total_admitted)} · expired{' '}
        {formatCount(r.total_expired)} · abandoned {formatCount(r.total_abandoned)} · session{' '}
        {formatDuration(r.session_ttl_secs)} · last pass{' '}
        {r.last_pass_ms === null || r.last_pass_ms === undefined ? '–' : `${r.last_pass_ms.toFixed(1)} ms`}
      </p>
      {eta && (
        <p class={`cr-eta${eta.belowAim ? ' cr-eta-low' : ''}`} data-stat="eta">
          {eta.text}
        </p>
      )}
      {(inflight || breaker) && (
        <ul class="cr-limits">
          {inflight && (
            <li class={inflight.near ? 'cr-limit-near' : undefined} data-stat="inflight">
              {inflight.text}
            </li>
          )}
          {breaker && (
            <li class={breaker.near ? 'cr-limit-near' : undefined} data-stat="breaker">
              {breaker.text}
              {breaker.fill && (
                <>
                  {' · '}
                  <strong data-stat="breaker-fill">{breaker.fill}</strong>
                </>
              )}
            </li>
          )}
        </ul>
      )}
      <ConfigForm id={id} room={r} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
      <SettingsEditor id={id} room={r.room} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
      <EventsPanel id={id} room={r.room} current={r.event} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
      <ModeSwitch id={id} room={r} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
      <div class="cr-actions">
        <button
          type="button"
          class={`cr-btn ${paused ? 'cr-btn-primary' : 'cr-btn-warn'}`}
          disabled={busy !== null}
          onClick={togglePause}
          data-action={paused ? 'resume' : 'pause'}
        >
          {paused ? 'Resume admissions' : 'Pause admissions'}
        </button>
        <button
          type="button"
          class="cr-btn cr-btn-danger"
          disabled={busy !== null}
          onClick={() => {
            setNotice(null);
            setFlushOpen(true);
          }}
          data-action="flush"
        >
          Empty the queue…
        </button>
      </div>
      <div class="cr-notice" role="status" aria-live="polite">
        {notice && <p class={notice.kind === 'ok' ? 'cr-msg cr-msg-ok' : 'cr-msg cr-msg-error'}>{notice.text}</p>}
      </div>
      {flushOpen && (
        <FlushDialog
          id={id}
          room={r}
          api={api}
          onClose={(result) => {
            setFlushOpen(false);
            if (result) {
              setNotice({
                kind: 'ok',
                text: `Emptied the queue: removed ${plural(result.flushed, 'visitor', 'visitors')} from the line.${auditNote(result.audit)}`,
              });
              refresh();
            }
          }}
          onUnauthorized={onUnauthorized}
        />
      )}
    </section>
  );
}

const SPARK_W = 300;
const SPARK_H = 48;

function Sparkline({ id, samples, now }: { id: string; samples: Sample[]; now: number }) {
  const g = sparkline(samples, { width: SPARK_W, height: SPARK_H, now });
  return (
    <figure class="cr-spark">
      <figcaption class="cr-muted" id={`${id}-spark`}>
        <span>Queue depth, last {WINDOW_MS / 60_000} min</span>
        <span>
          peak {formatCount(g.peak)} · scale 0–{formatCount(g.top)}
        </span>
      </figcaption>
      <svg
        viewBox={`0 0 ${SPARK_W} ${SPARK_H}`}
        preserveAspectRatio="none"
        role="img"
        aria-labelledby={`${id}-spark`}
        aria-describedby={`${id}-spark-desc`}
        data-samples={samples.length}
      >
        <desc id={`${id}-spark-desc`}>{describeHistory(samples, now)}</desc>
        <line class="cr-spark-grid" x1="0" x2={SPARK_W} y1={SPARK_H / 2} y2={SPARK_H / 2} />
        {g.area && <path class="cr-spark-area" d={g.area} />}
        {g.line && <path class="cr-spark-line" d={g.line} />}
      </svg>
    </figure>
  );
}

function ConfigForm(props: {
  id: string;
  room: RoomView;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { id, room: r } = props;
  const [edits, setEdits] = useState<{ rate?: string; max_active?: string }>({});
  /** The settings a change just set, shown until the polled statistics catch up (≤ 3 s). */
  const [applied, setApplied] = useState<{ settings: Settings; at: number } | null>(null);
  const [errors, setErrors] = useState<Partial<Record<'rate' | 'max_active' | 'form', string>>>({});
  const [result, setResult] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const recent = applied && Date.now() - applied.at < 3000 ? applied.settings : null;
  const live = {
    rate: String(recent?.rate ?? r.rate ?? ''),
    max_active: String(recent?.max_active ?? r.max_active ?? ''),
  };
  const value = { rate: edits.rate ?? live.rate, max_active: edits.max_active ?? live.max_active };
  const dirty = edits.rate !== undefined || edits.max_active !== undefined;

  const edit = (field: 'rate' | 'max_active', v: string) => {
    setEdits((e) => ({ ...e, [field]: v }));
    setErrors((e) => ({ ...e, [field]: undefined, form: undefined }));
    setResult(null);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const patch = buildPatch(value, { rate: r.rate, max_active: r.max_active });
    if (Object.keys(patch).length === 0) {
      setEdits({});
      setResult('Nothing to change.');
      return;
    }
    setBusy(true);
    setErrors({});
    setResult(null);
    try {
      const res = await props.api.configure(r.room, patch);
      const changes = Object.keys(patch)
        .map((k) =>
          k === 'rate'
            ? `rate ${formatRate(r.rate)} → ${formatRate(res.settings.rate)}/s`
            : `max on the site ${formatCount(r.max_active)} → ${formatCount(res.settings.max_active)}`,
        )
        .join(', ');
      setApplied({ settings: res.settings, at: Date.now() });
      setEdits({});
      setResult(`Applied ${changes}; takes effect on the next admission pass.${auditNote(res.audit)}`);
      props.refresh();
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
      if (e.unauthorized) {
        props.onUnauthorized(e);
      } else if (e.field === 'rate' || e.field === 'max_active') {
        setErrors({ [e.field]: fieldMessage(e) });
        document.getElementById(`${id}-${e.field}`)?.focus();
      } else {
        setErrors({ form: `Not changed: ${e.message}` });
      }
    } finally {
      setBusy(false);
    }
  };

  const field = (name: 'rate' | 'max_active', label: string, unit: string, mode: 'decimal' | 'numeric') => {
    const err = errors[name];
    return (
      <div class={`cr-field${err ? ' cr-field-invalid' : ''}`}>
        <label for={`${id}-${name}`}>{label}</label>
        <div class="cr-input-unit">
          <input
            id={`${id}-${name}`}
            name={name}
            type="text"
            inputMode={mode}
            autocomplete="off"
            spellcheck={false}
            value={value[name]}
            aria-invalid={err ? 'true' : undefined}
            aria-describedby={err ? `${id}-${name}-error` : undefined}
            onInput={(ev) => edit(name, (ev.currentTarget as HTMLInputElement).value)}
          />
          <span class="cr-unit" aria-hidden="true">
            {unit}
          </span>
        </div>
        {err && (
          <p class="cr-field-error" id={`${id}-${name}-error`} data-field-error={name}>
            {err}
          </p>
        )}
      </div>
    );
  };

  return (
    <form class="cr-config" onSubmit={submit} noValidate aria-label={`Settings of ${r.room}`}>
      <div class="cr-config-fields">
        {field('rate', 'Rate (admitted per second)', '/s', 'decimal')}
        {field('max_active', 'Max on the site', 'sessions', 'numeric')}
        <div class="cr-config-buttons">
          <button type="submit" class="cr-btn cr-btn-primary" disabled={busy || !dirty}>
            {busy ? 'Applying…' : 'Apply'}
          </button>
          <button
            type="button"
            class="cr-btn"
            disabled={busy || !dirty}
            onClick={() => {
              setEdits({});
              setErrors({});
              setResult(null);
            }}
          >
            Reset
          </button>
        </div>
      </div>
      <div role="alert" class="cr-config-alert">
        {errors.form && <p class="cr-msg cr-msg-error">{errors.form}</p>}
        {(errors.rate || errors.max_active) && (
          <p class="cr-sr">Not changed: {errors.rate ? `rate: ${errors.rate}` : `max on the site: ${errors.max_active}`}</p>
        )}
      </div>
      <div role="status" aria-live="polite">
        {result && <p class="cr-msg cr-msg-ok">{result}</p>}
      </div>
    </form>
  );
}

function FlushDialog(props: {
  id: string;
  room: RoomView;
  api: Api;
  onClose: (result: { flushed: number; audit: { written: boolean; error?: string } } | null) => void;
  onUnauthorized: (e: ApiError) => void;
}) {
  const { id, room: r } = props;
  const dialog = useRef<HTMLDialogElement>(null);
  const [typed, setTyped] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const confirmed = typed.trim() === r.room;

  useEffect(() => {
    const d = dialog.current;
    if (d && !d.open) d.showModal();
    return () => {
      if (d?.open) d.close();
    };
  }, []);

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!confirmed || busy) return;
    setBusy(true);
    setError(null);
    try {
      const res = await props.api.flush(r.room);
      props.onClose({ flushed: res.flushed, audit: res.audit });
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
      if (e.unauthorized) props.onUnauthorized(e);
      else setError(`Nothing was removed: ${e.message}`);
      setBusy(false);
    }
  };

  return (
    <dialog
      ref={dialog}
      class="cr-dialog"
      aria-labelledby={`${id}-flush-title`}
      aria-describedby={`${id}-flush-what`}
      onCancel={(e) => {
        e.preventDefault();
        props.onClose(null);
      }}
    >
      <form onSubmit={submit} noValidate>
        <h2 id={`${id}-flush-title`}>Empty the queue of “{r.room}”?</h2>
        <p id={`${id}-flush-what`}>
          This removes all {plural(r.waiting ?? 0, 'visitor', 'visitors')} now waiting in line. They lose their place
          and have to join again. Visitors already on the site are not affected. This cannot be undone.
        </p>
        <label for={`${id}-flush-confirm`}>
          Type the room name, <strong>{r.room}</strong>, to confirm
        </label>
        <input
          id={`${id}-flush-confirm`}
          type="text"
          autocomplete="off"
          spellcheck={false}
          autoFocus
          value={typed}
          onInput={(e) => setTyped((e.currentTarget as HTMLInputElement).value)}
        />
        {error && (
          <p class="cr-msg cr-msg-error" role="alert">
            {error}
          </p>
        )}
        <div class="cr-dialog-buttons">
          <button type="button" class="cr-btn" onClick={() => props.onClose(null)}>
            Cancel
          </button>
          <button type="submit" class="cr-btn cr-btn-danger" disabled={!confirmed || busy} data-action="confirm-flush">
            {busy ? 'Emptying…' : 'Empty the queue'}
          </button>
        </div>
      </form>
    </dialog>
  );
}
