"""Tests of memory_store.py: row counts and lines worked out by hand, the history a replace keeps, what a forget
leaves, and the database file's bytes after a forget (with runs that show the byte check can fail)."""
from contextlib import closing
import hashlib
import os
from pathlib import Path
import random
import sqlite3
import string
import unittest
from unittest import mock

import memory_store
from memory_store import SIBLINGS, MemoryStore, StoreError, stored_bytes
from test_support_fixtures import TempFolderTest

P1, P2 = "Ana's phone number is 555-0142", "Ana's phone number is 555-0199"
LISBON, PORTO, MANAGER = 'Ana lives in Lisbon', 'Ana lives in Porto', "Ana's manager is Priya"
TEA = 'Bob drinks tea'
ANA = [{'time': 1, 'action': 'remember', 'fact': P1},
       {'time': 2, 'action': 'remember', 'fact': LISBON},
       {'time': 3, 'action': 'replace', 'fact': P2, 'replaces': P1},
       {'time': 4, 'action': 'remember', 'fact': MANAGER},
       {'time': 5, 'action': 'replace', 'fact': PORTO, 'replaces': LISBON},
       {'time': 6, 'action': 'replace', 'fact': LISBON, 'replaces': PORTO},  # Lisbon again: history and current
       {'time': 7, 'action': 'forget', 'fact': LISBON}]
BOB = [{'turn': 1, 'action': 'remember', 'fact': TEA},  # a replay's events carry "turn", not "time"
       {'turn': 2, 'action': 'forget', 'fact': TEA},
       {'turn': 3, 'action': 'remember', 'fact': TEA}]


def counts(stored, current, superseded, deletions) -> dict:
    return {'stored': stored, 'current': current, 'superseded': superseded, 'deletions': deletions}


def open_descriptors(path: Path) -> list[str]:
    """This process's open file descriptors on the store's file or a file beside it (Linux's /proc)."""
    names = {os.path.realpath(f'{path}{end}') for end in SIBLINGS}
    return [fd for fd in os.listdir('/proc/self/fd') if os.path.realpath(f'/proc/self/fd/{fd}') in names]


class StoreTest(TempFolderTest):

    def filled(self, managed: bool, name: str = 'store.db') -> tuple[Path, list]:
        """Applies ana's and bob's events to a new store, recording ana's counts and lines after each event."""
        path, steps = self.tmp / name, []
        with MemoryStore(path, managed) as store:
            for event in ANA:
                store.apply('ana', event)
                steps.append((store.counts('ana'), store.lines('ana')))
            for event in BOB:
                store.apply('bob', event)
            steps.append((store.counts('bob'), store.lines('bob'), store.counts()))
        return path, steps

    def rows(self, path: Path, query: str) -> list[tuple]:
        with closing(sqlite3.connect(path)) as db, db:  # closed even when the statement is refused
            return db.execute(query).fetchall()


class CountsAndLines(StoreTest):

    def test_managed_counts_and_lines_after_each_event_match_the_hand_worked_values(self):
        _, steps = self.filled(managed=True)
        self.assertEqual(steps[:7], [
            (counts(1, 1, 0, 0), [P1]),
            (counts(2, 2, 0, 0), [P1, LISBON]),
            (counts(3, 2, 1, 0), [LISBON, P2]),
            (counts(4, 3, 1, 0), [LISBON, P2, MANAGER]),
            (counts(5, 3, 2, 0), [P2, MANAGER, PORTO]),
            (counts(6, 3, 3, 0), [P2, MANAGER, LISBON]),
            (counts(3, 2, 1, 1), [P2, MANAGER])])  # Lisbon and the history it replaced, Porto and Lisbon, went
        # bob: tea forgotten, then remembered anew; all users: ana's 3 rows and bob's 1
        self.assertEqual(steps[7], (counts(1, 1, 0, 1), [TEA], counts(4, 3, 1, 2)))

    def test_append_only_lines_keep_stale_and_forgotten_texts(self):
        _, steps = self.filled(managed=False)
        every = [P1, LISBON, P2, MANAGER, PORTO, LISBON]
        self.assertEqual([lines for _, lines in steps[:7]],
                         [every[:1], every[:2], every[:3], every[:4], every[:5], every, every])
        self.assertEqual(steps[6][0], counts(6, 6, 0, 0))  # every row stays one a block may hold
        self.assertEqual(steps[7], (counts(2, 2, 0, 0), [TEA, TEA], counts(8, 8, 0, 0)))

    def test_append_only_file_refuses_an_update_or_delete_made_around_the_store(self):
        path, _ = self.filled(managed=False)
        for statement in ("UPDATE facts SET fact = 'x'", 'DELETE FROM facts'):
            with self.subTest(statement), self.assertRaises(sqlite3.IntegrityError):
                self.rows(path, statement)
        self.assertEqual(len(self.rows(path, 'SELECT * FROM facts')), 8)


class ManagedHistory(StoreTest):

    def test_a_replace_keeps_the_old_row_as_history_and_a_forget_deletes_the_history_it_replaced(self):
        path = self.tmp / 'history.db'
        history = ('SELECT f.fact, f.time, f.superseded_at, s.fact FROM facts f '
                   'LEFT JOIN facts s ON s.id = f.replaced_by ORDER BY f.id')
        with MemoryStore(path, managed=True) as store:
            for event in ANA[:6]:
                store.apply('ana', event)
        self.assertEqual(self.rows(path, history), [
            (P1, 1, 3, P2), (LISBON, 2, 5, PORTO), (P2, 3, None, None), (MANAGER, 4, None, None),
            (PORTO, 5, 6, LISBON), (LISBON, 6, None, None)])
        with MemoryStore(path, managed=True) as store:  # reopened: the file is the store
            store.apply('ana', ANA[6])
        # An old home is as private as the new one: forgetting Lisbon takes Porto and the Lisbon before it too.
        self.assertEqual(self.rows(path, history), [(P1, 1, 3, P2), (P2, 3, None, None), (MANAGER, 4, None, None)])

    def test_a_forget_deletes_every_row_of_the_user_holding_its_text_and_no_other_users_row(self):
        path, milk = self.tmp / 'holding.db', f'{TEA} with milk'
        with MemoryStore(path, managed=True) as store:
            for user, time, fact in (('bob', 1, milk), ('bob', 2, TEA), ('bob', 3, 'Bob drinks Tea'), ('ana', 4, TEA)):
                store.apply(user, {'time': time, 'action': 'remember', 'fact': fact})
            store.apply('bob', {'time': 5, 'action': 'forget', 'fact': TEA})
            # "Bob drinks tea with milk" holds the text and goes; another case, or ana's row, is not bob's text.
            self.assertEqual((store.lines('bob'), store.lines('ana')), (['Bob drinks Tea'], [TEA]))
        self.assertEqual(self.rows(path, 'SELECT user, time, rows FROM deletions'), [('bob', 5, 2)])
        self.assertNotIn(milk.encode(), stored_bytes(path))

    def test_a_deletion_record_holds_no_text_and_no_hash_of_it(self):
        path, _ = self.filled(managed=True)
        self.assertEqual([column for _, column, *_ in self.rows(path, 'PRAGMA table_info(deletions)')],
                         ['id', 'user', 'time', 'rows'])
        self.assertEqual(self.rows(path, 'SELECT user, time, rows FROM deletions ORDER BY id'),
                         [('ana', 7, 3), ('bob', 2, 1)])
        digest = hashlib.sha256(LISBON.encode()).digest()
        self.assertNotIn(digest, stored_bytes(path))
        self.assertNotIn(digest.hex().encode(), stored_bytes(path))


class ForgottenBytes(StoreTest):

    def forget_lisbon(self, path: Path) -> tuple[bytes, bytes]:
        """The file's bytes (and its siblings') just after the forget, store still open, and after closing."""
        with MemoryStore(path, managed=True) as store:
            for event in ANA:
                store.apply('ana', event)
            while_open = stored_bytes(path)
        return while_open, stored_bytes(path)

    def test_the_managed_file_holds_no_forgotten_text_after_the_forget(self):
        path = self.tmp / 'store.db'
        for moment, raw in zip(('open', 'closed'), self.forget_lisbon(path)):
            with self.subTest(moment):
                self.assertNotIn(LISBON.encode(), raw)
                self.assertIn(MANAGER.encode(), raw)  # the bytes read are the store's: its current facts are there
        self.assertEqual([end for end in SIBLINGS if Path(f'{path}{end}').exists()], [''])

    def test_the_byte_check_finds_the_text_when_sqlite_is_set_to_keep_it_and_no_vacuum_follows(self):
        # Shows the check above can fail: each setting leaves the forgotten text in the file it names.
        controls = {'secure_delete off: the freed cells in the file': ({'secure_delete': '0'}, ''),
                    'WAL: the -wal file until a checkpoint': ({'journal_mode': 'wal'}, '-wal'),
                    'PERSIST: the -journal file kept after the commit': ({'journal_mode': 'persist'}, '-journal')}
        for name, (pragmas, end) in controls.items():
            with self.subTest(name), mock.patch.dict(memory_store.PRAGMAS, pragmas), \
                    mock.patch.object(MemoryStore, '_erase', lambda *args: None):
                path = self.tmp / f'control{end}.db'
                with MemoryStore(path, managed=True) as store:
                    for event in ANA:
                        store.apply('ana', event)
                    self.assertIn(LISBON.encode(), Path(f'{path}{end}').read_bytes())

    def test_a_forget_whose_text_outlives_the_vacuum_is_refused_in_one_line(self):
        # In WAL mode VACUUM writes the rebuilt pages to the -wal file, where the old ones stay until a checkpoint:
        # the store's own reading of the bytes after the VACUUM finds the text and says so.
        with mock.patch.dict(memory_store.PRAGMAS, {'journal_mode': 'wal'}), \
                MemoryStore(self.tmp / 'wal.db', managed=True) as store:
            for event in ANA[:6]:
                store.apply('ana', event)
            with self.assertRaises(StoreError) as caught:
                store.apply('ana', ANA[6])
        self.assertEqual(str(caught.exception), f"{self.tmp / 'wal.db'}: user 'ana', event at time 7: the forget "
                         "deleted 3 rows, but after VACUUM the file or one beside it still holds 3 of their texts, "
                         f"such as {LISBON!r}")

    def test_the_append_only_file_still_holds_the_forgotten_text(self):
        path, _ = self.filled(managed=False)
        self.assertIn(LISBON.encode(), stored_bytes(path))


def random_fact(rng: random.Random, serial: int) -> str:
    """A fact of 10 to 150 characters that no other fact holds: its serial number, a colon, then letters."""
    length = rng.randint(10, 150)
    return f'{serial}:' + ''.join(rng.choice(string.ascii_lowercase + ' ') for _ in range(length - len(f'{serial}:')))


def random_events(seed: int, users: int, steps: int):
    """(user, event, the texts a forget deletes) for `steps` random events: a remember (4 in 10), a replace (4 in 10)
    or a forget (2 in 10) of a current fact of one of `users` users; each text a forget deletes is the fact and the
    facts its chain of replaces replaced, worked out here without the store."""
    rng, current = random.Random(seed), {f'user{index}': {} for index in range(users)}  # fact -> what it replaced
    for step in range(1, steps + 1):
        user = rng.choice(sorted(current))
        facts, fact = current[user], random_fact(rng, step)
        action = rng.choices(('remember', 'replace', 'forget'), (4, 4, 2))[0] if facts else 'remember'
        old = rng.choice(sorted(facts)) if action != 'remember' else None
        if action == 'remember':
            facts[fact] = []
            yield user, {'time': step, 'action': action, 'fact': fact}, []
        elif action == 'replace':
            facts[fact] = [*facts.pop(old), old]
            yield user, {'time': step, 'action': action, 'fact': fact, 'replaces': old}, []
        else:
            yield user, {'time': step, 'action': action, 'fact': old}, [old, *facts.pop(old)]


class RandomReplays(StoreTest):
    """Random replays that grow a managed store past several pages, so that SQLite rebalances its tables, with the
    file's bytes (and any file beside it) read after every forget for every text a forget has deleted so far."""
    SEEDS, USERS, STEPS = range(6), 3, 600  # without the VACUUM, 2 of these 6 replays leak (the test below)

    def first_leak(self, seed: int) -> tuple[int, str] | None:
        """(the time of the first forget after which the bytes hold a deleted text, that text), or None."""
        path, gone, pages = self.tmp / f'replay-{seed}.sqlite', [], 0
        with mock.patch.dict(memory_store.PRAGMAS, {'synchronous': '0'}), MemoryStore(path, managed=True) as store:
            for user, event, deleted in random_events(seed, self.USERS, self.STEPS):
                store.apply(user, event)
                pages = max(pages, path.stat().st_size // 4096)
                if deleted:
                    gone += deleted
                    raw = stored_bytes(path)
                    if leaked := next((text for text in gone if text.encode() in raw), None):
                        return event['time'], leaked
        self.assertGreaterEqual(pages, 6)  # grown past several pages
        return None

    def test_no_forgotten_text_or_its_history_is_left_in_the_bytes_after_any_forget(self):
        # synchronous=0 only skips the fsync calls, so that 3600 events take seconds: the bytes written are the same.
        for seed in self.SEEDS:
            with self.subTest(seed=seed):
                self.assertIsNone(self.first_leak(seed))

    def test_without_the_vacuum_the_same_replays_leave_forgotten_text_in_the_file(self):
        # What the store did before it ran VACUUM after each forget: secure_delete alone misses the old copies a
        # rebalance leaves in a page's unused space.
        with mock.patch.object(MemoryStore, '_erase', lambda *args: None):
            leaks = {seed: self.first_leak(seed) for seed in self.SEEDS}
        self.assertEqual([seed for seed, leak in leaks.items() if leak], [0, 5])


class Refusals(StoreTest):

    def refusal(self, store: MemoryStore, user: str, event: dict) -> str:
        before = store.counts()
        with self.assertRaises(StoreError) as caught:
            store.apply(user, event)
        self.assertEqual(store.counts(), before)  # a refused event changes nothing
        message = str(caught.exception)
        self.assertTrue(message.startswith(f'{store.path}: '), message)
        self.assertNotIn('\n', message)
        return message

    def test_an_event_the_managed_store_cannot_apply_is_one_line_and_changes_nothing(self):
        with MemoryStore(self.tmp / 'store.db', managed=True) as store:
            for event in ANA[:3]:
                store.apply('ana', event)
            self.assertIn('no such current fact', self.refusal(store, 'ana', ANA[2]))  # P1 is history now
            self.assertIn('no such current fact',
                          self.refusal(store, 'ana', {'time': 8, 'action': 'forget', 'fact': TEA}))
            self.assertIn('no such current fact', self.refusal(store, 'bob', ANA[6]))  # ana's fact, not bob's
            self.assertIn('already a current fact', self.refusal(store, 'ana', ANA[1]))

    def test_a_malformed_event_is_refused_in_one_line_by_both_stores(self):
        bad = [({'time': 1, 'action': 'recall', 'fact': P1}, 'expected "action" one of'),
               ({'action': 'remember', 'fact': P1}, 'expected a user name and an integer'),
               ({'time': True, 'action': 'remember', 'fact': P1}, 'expected a user name and an integer'),
               ({'time': 2**63, 'action': 'remember', 'fact': P1}, f'"turn" from 1 to {2**63 - 1}'),  # SQLite's most
               ({'time': 0, 'action': 'remember', 'fact': P1}, f'"turn" from 1 to {2**63 - 1}'),
               ({'time': 1, 'action': 'remember', 'fact': ''}, 'a non-empty "fact"'),
               ({'time': 1, 'action': 'replace', 'fact': P2}, 'a replace, and only a replace'),
               ({'time': 1, 'action': 'forget', 'fact': P1, 'replaces': P2}, 'a replace, and only a replace'),
               (['not', 'an', 'event'], 'expected a user name and an integer')]
        for managed in (True, False):
            with MemoryStore(self.tmp / f'{managed}.db', managed) as store:
                store.apply('ana', ANA[0])
                for event, expected in bad:
                    with self.subTest(managed=managed, event=event):
                        self.assertIn(expected, self.refusal(store, 'ana', event))

    def test_a_long_event_is_named_in_its_first_200_characters_its_cut_marked(self):
        with MemoryStore(self.tmp / 'store.db', managed=True) as store:
            message = self.refusal(store, 'ana', {'time': 1, 'action': 'recall', 'fact': 'x' * 500})
        self.assertIn(f"event {{'time': 1, 'action': 'recall', 'fact': '{'x' * 156}...: expected", message)

    def test_the_append_only_store_refuses_to_replace_or_forget_a_text_it_never_stored(self):
        with MemoryStore(self.tmp / 'store.db', managed=False) as store:
            store.apply('ana', ANA[0])
            self.assertIn('no such current fact', self.refusal(store, 'ana', ANA[4]))
            self.assertIn('no such current fact', self.refusal(store, 'ana', ANA[6]))

    def test_a_file_of_the_other_kind_or_not_a_database_is_refused_and_left_closed(self):
        path, _ = self.filled(managed=True)
        garbage = self.tmp / 'notes.db'
        garbage.write_bytes(b'not a database, just text ' * 100)
        for target, managed, expected in ((path, False, 'holds a managed store'),
                                          (garbage, True, 'cannot be opened as a memory store')):
            with self.subTest(target.name), self.assertRaises(StoreError) as caught:
                MemoryStore(target, managed)
            self.assertTrue(str(caught.exception).startswith(f'{target}: {expected}'), caught.exception)
            if Path('/proc/self/fd').is_dir():
                self.assertEqual(open_descriptors(target), [])


@unittest.skipUnless(Path('/proc/self/fd').is_dir(), 'reads the open file descriptors from Linux /proc')
class Closing(StoreTest):

    def test_close_leaves_no_descriptor_on_the_file_and_no_file_beside_it(self):
        path = self.tmp / 'store.db'
        store = MemoryStore(path, managed=True)
        store.apply('ana', ANA[0])
        self.assertNotEqual(open_descriptors(path), [])  # the check sees an open store
        store.close()
        self.assertEqual(open_descriptors(path), [])
        self.assertEqual(sorted(os.listdir(self.tmp)), ['store.db'])


if __name__ == '__main__':
    unittest.main()
