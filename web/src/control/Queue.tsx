// The Queue view: the head of each line, a search by reference, and a confirmed "move to
// front" per visitor (docs/security.md, "Priority").
import { useEffect, useRef, useState } from 'preact/hooks';
import {
  Api,
  ApiError,
  normalizeRef,
  type QueueEntry,
  type QueueResult,
  type RoomView,
} from './api';
import { formatAge, formatClock, plural } from './format';
import { auditNote, slug, type Notice } from './ui';

/** How often the Queue view re-reads the head of each line. */
const QUEUE_POLL_MS = 2000;
/** How many of the head of the line the Queue view shows. */
const QUEUE_LIMIT = 50;

/** The Queue view: for every room, the head of the line and a search by reference, with a
 * confirmed "move to front" per visitor (docs/security.md, "Priority"). */
export function QueueView(props: {
  rooms: RoomView[] | null;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { rooms } = props;
  return (
    <>
      <h2 class="cr-sr">Queue</h2>
      {rooms === null ? (
        <p class="cr-muted">Loading rooms…</p>
      ) : rooms.length === 0 ? (
        <p class="cr-muted">This anteroom has no rooms.</p>
      ) : (
        <div class="cr-queues">
          {rooms.map((r, i) => (
            <QueuePanel
              key={r.room}
              id={`${slug(r.room, i)}-q`}
              room={r.room}
              api={props.api}
              onUnauthorized={props.onUnauthorized}
              refresh={props.refresh}
            />
          ))}
        </div>
      )}
    </>
  );
}

function when(ms: number | null, now: number): string {
  if (ms === null) return '–';
  return `${formatClock(ms)} (${formatAge(Math.max(0, (now - ms) / 1000))} ago)`;
}

function QueuePanel(props: {
  id: string;
  room: string;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { id, room, api, onUnauthorized } = props;
  const [head, setHead] = useState<QueueResult | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [typed, setTyped] = useState('');
  const [searchError, setSearchError] = useState<string | null>(null);
  /** The search's answer: the reference searched for and what was found. */
  const [found, setFound] = useState<{ ref: string; entries: QueueEntry[] } | null>(null);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState<Notice | null>(null);
  const [now, setNow] = useState(() => Date.now());
  const reloadRef = useRef<() => void>(() => {});

  const asApiError = (err: unknown) => (err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err)));

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      clearTimeout(timer);
      try {
        const result = await api.queue(room, { limit: QUEUE_LIMIT });
        if (stopped) return;
        setHead(result);
        setLoadError(null);
      } catch (err) {
        if (stopped) return;
        const e = asApiError(err);
        if (e.unauthorized) {
          stopped = true;
          onUnauthorized(e);
          return;
        }
        setLoadError(e.message);
      }
      setNow(Date.now());
      if (!stopped) timer = setTimeout(load, QUEUE_POLL_MS);
    };
    reloadRef.current = () => void load();
    void load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [api, room, onUnauthorized]);

  const search = async (e: Event) => {
    e.preventDefault();
    setNotice(null);
    const ref = normalizeRef(typed);
    if (ref === null) {
      setSearchError('A reference is 8 letters and digits, as the waiting page shows it.');
      return;
    }
    setSearchError(null);
    try {
      const result = await api.queue(room, { ref });
      setFound({ ref, entries: result.entries });
      setNow(Date.now());
    } catch (err) {
      const e = asApiError(err);
      if (e.unauthorized) onUnauthorized(e);
      else setSearchError(`The search failed: ${e.message}`);
    }
  };

  const move = async (ref: string) => {
    setBusy(true);
    setNotice(null);
    try {
      const res = await api.moveToFront(room, ref);
      setNotice({ kind: 'ok', text: `Moved ${ref} to position ${res.position ?? 1}.${auditNote(res.audit)}` });
      setConfirming(null);
      if (found) setFound({ ref: found.ref, entries: found.entries.map((x) => (x.ref === ref ? { ...x, position: res.position } : x)) });
      reloadRef.current();
      props.refresh();
    } catch (err) {
      const e = asApiError(err);
      setConfirming(null);
      if (e.unauthorized) onUnauthorized(e);
      else if (e.status === 404) setNotice({ kind: 'error', text: `${ref} is no longer waiting (admitted, gone or flushed).` });
      else setNotice({ kind: 'error', text: `Move to front failed: ${e.message}` });
    } finally {
      setBusy(false);
    }
  };

  const rows = found ? found.entries : (head?.entries ?? []);

  return (
    <section class="cr-tile cr-queue" aria-labelledby={`${id}-name`} data-queue={room}>
      <header class="cr-tile-head">
        <h3 id={`${id}-name`}>{room}</h3>
        <span class="cr-muted">
          {head?.waiting === null || head?.waiting === undefined ? '' : `${plural(head.waiting, 'visitor', 'visitors')} waiting`}
        </span>
      </header>
      <form class="cr-search" onSubmit={search} noValidate role="search" aria-label={`Find a visitor in ${room}`}>
        <label for={`${id}-ref`}>Find a visitor by ref</label>
        <input
          id={`${id}-ref`}
          type="text"
          autocomplete="off"
          spellcheck={false}
          value={typed}
          aria-invalid={searchError ? 'true' : undefined}
          aria-describedby={searchError ? `${id}-ref-error` : undefined}
          onInput={(e) => setTyped((e.currentTarget as HTMLInputElement).value)}
        />
        <button type="submit" class="cr-btn">
          Find
        </button>
        {found && (
          <button
            type="button"
            class="cr-btn"
            onClick={() => {
              setFound(null);
              setTyped('');
              setSearchError(null);
            }}
          >
            Show the head of the line
          </button>
        )}
        {searchError && (
          <p id={`${id}-ref-error`} class="cr-msg cr-msg-error" role="alert">
            {searchError}
          </p>
        )}
      </form>
      {loadError && <p class="cr-msg cr-msg-error">Cannot read the line: {loadError}</p>}
      {found && found.entries.length === 0 ? (
        <p class="cr-muted" data-testid="not-found">
          Nobody waiting in {room} has the reference {found.ref}.
        </p>
      ) : rows.length === 0 ? (
        <p class="cr-muted">{head === null ? 'Loading the line…' : 'Nobody is waiting.'}</p>
      ) : (
        <table class="cr-table">
          <caption class="cr-sr">
            {found ? `Visitor ${found.ref} in ${room}` : `The first ${rows.length} in line in ${room}`}
          </caption>
          <thead>
            <tr>
              <th scope="col">Position</th>
              <th scope="col">Ref</th>
              <th scope="col">Joined</th>
              <th scope="col">Last seen</th>
              <th scope="col">
                <span class="cr-sr">Action</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((e) => (
              <tr key={e.ref} data-ref={e.ref}>
                <td data-col="position">{e.position ?? 'in the draw'}</td>
                <td>
                  <code>{e.ref}</code>
                </td>
                <td>{when(e.joined_at_ms, now)}</td>
                <td>{when(e.last_seen_ms, now)}</td>
                <td class="cr-row-actions">
                  {confirming === e.ref ? (
                    <>
                      <span>Move {e.ref} to position 1?</span>
                      <button type="button" class="cr-btn cr-btn-primary" disabled={busy} onClick={() => void move(e.ref)}>
                        Confirm move
                      </button>
                      <button type="button" class="cr-btn" disabled={busy} onClick={() => setConfirming(null)}>
                        Cancel
                      </button>
                    </>
                  ) : (
                    <button
                      type="button"
                      class="cr-btn"
                      disabled={busy}
                      onClick={() => {
                        setNotice(null);
                        setConfirming(e.ref);
                      }}
                    >
                      Move to front<span class="cr-sr"> {e.ref}</span>
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <div class="cr-notice" role="status" aria-live="polite">
        {notice && <p class={notice.kind === 'ok' ? 'cr-msg cr-msg-ok' : 'cr-msg cr-msg-error'}>{notice.text}</p>}
      </div>
    </section>
  );
}
