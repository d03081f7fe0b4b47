"""Replace a folder as a whole: build the new one beside it, then swap it in with two renames.

    .venv/bin/python folder_swap.py --help   # no command of its own: prepare.py replaces prepared/ with it

replace(path, fill, say) makes a temporary folder beside the target, in the same parent and so on the same
filesystem, where a rename moves a folder without copying it: .NAME.swap-PID-RANDOM, named after the running
process. fill(workdir, new) builds the new folder inside it. Then the target, if there is one, is renamed into
the temporary folder, the new folder is renamed to the target, and the temporary folder, holding the replaced
one, is removed. If the second rename fails, the first is undone. So the target is at every moment either the
old folder, untouched, or the complete new one. Ctrl-C, SIGTERM and SIGHUP are held (noted, not acted on)
from the first rename until the temporary folder is gone, so no interrupt lands between the renames or halfway
through a removal. A run killed outright (kill -9, a power cut) between the two renames leaves the target
missing and the old folder in the temporary folder: the next run beside that target puts it back first.

A target that is a symlink is followed: the folder it names is replaced and the link stays a link. The new
folder gets the old one's permissions. A removal that fails is said, with the folder's path, through say().

It writes only in the target's parent folder, and removes only its own temporary folders and the folder it
replaces. It does not check what the old folder holds (the caller decides whether it may go), and uses the
standard library only.
"""
import contextlib
import glob
import os
from pathlib import Path
import secrets
import shutil
import signal
import stat
import threading

TMP_MARK = '.swap-'  # .prepared.swap-4242-x1y2: the temporary folder of process 4242 beside prepared/
NEW = 'new'  # inside the temporary folder: the folder being built
OLD = 'old'  # inside the temporary folder: the replaced folder, until it is removed
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill, a closed terminal


class SwapError(Exception):
    """The swap could not be completed or undone; the message says where the old folder is."""


def target_of(path: Path) -> Path:
    """The folder a swap replaces: path itself, or the folder its symlinks name (the links stay)."""
    return Path(os.path.realpath(path))


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of path, None if nothing is there: a swap changes it, a swap undone does not."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def temporary_prefix(target: Path, pid: int | str = '') -> str:
    """'.prepared.swap-' for any run's temporary folders beside /x/prepared; '.prepared.swap-42-' for run 42's."""
    return f'.{target.name}{TMP_MARK}' + (f'{pid}-' if pid != '' else '')


def left_by_this_run(target: Path) -> list[Path]:
    """This process's temporary folders beside target that are still there (a removal failed)."""
    return sorted(target.parent.glob(glob.escape(temporary_prefix(target, os.getpid())) + '*'))


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process is there
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def remove(folder: Path) -> str | None:
    """Remove folder and what it holds; None once it is gone, else why not (it stays, perhaps in part)."""
    if not os.path.lexists(folder):  # never made (its parent is missing or a file): nothing to remove
        return None
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f'{error.strerror or error}: {error.filename}' if error.filename else str(error)
    return None


def said_removal(folder: Path, problem: str | None, done: str) -> str:
    """The line for a removal: done if it worked, else the folder's path and why, so a person can remove it."""
    return done if problem is None else f'could not remove {folder} ({problem}); remove it yourself'


def recover_abandoned(target: Path, say) -> None:
    """Deal with the temporary folders beside target whose run no longer exists (a running one's is left).

    A run killed between its two renames left the target missing and the old folder inside: it is put back.
    """
    for folder in sorted(target.parent.glob(glob.escape(temporary_prefix(target)) + '*')):
        owner = folder.name.removeprefix(temporary_prefix(target)).split('-', 1)[0]
        if owner.isdigit() and process_exists(int(owner)):
            continue
        if (folder / OLD).is_dir() and not os.path.lexists(target):
            os.rename(folder / OLD, target)
            say(f'put {target} back from {folder / OLD}, where a run stopped between two renames left it')
        say(said_removal(folder, remove(folder), f'removed {folder.name}, left in {target.parent} by an earlier '
                                                  'run that was stopped'))


def missing_folders(folder: Path) -> list[Path]:
    """folder and its ancestors that do not exist yet, deepest first: what mkdir(parents=True) would make."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


@contextlib.contextmanager
def signals_held():
    """Until the block ends, Ctrl-C, SIGTERM and SIGHUP are only noted (the list yielded), not acted on.

    Handlers can be set only in the main thread; elsewhere the block runs as it is.
    """
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    previous = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum))
                for signum in HELD_SIGNALS}
    try:
        yield arrived
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def swap_in(new: Path, target: Path, workdir: Path) -> None:
    """Rename new to target; an existing target goes to workdir/OLD first, and back if the second rename fails."""
    old = workdir / OLD
    replacing = os.path.lexists(target)
    if replacing:
        os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        if replacing:
            try:
                os.rename(old, target)
            except OSError as error:
                raise SwapError(f'{target} could not be put back after a failed swap ({error.strerror}): the '
                                f'previous folder is now {old}; move it back with mv') from error
        raise


def replace(path: Path, fill, say) -> None:
    """Replace the folder at path (or the one its symlink names) with the one fill(workdir, new) builds in new.

    On any failure or interrupt, the target is as it was, and the temporary folder and any parent folders this
    call made are removed (a removal that fails is said, naming the folder). OSError and KeyboardInterrupt
    pass through; SwapError when the old folder could not be put back.
    """
    target = target_of(path)
    if os.path.lexists(target) and not target.is_dir():
        raise SwapError(f'{path} is not a folder')
    made = missing_folders(target.parent)
    # Named before it is made, so that an interrupt right after mkdir still finds it to remove.
    workdir = target.parent / f'{temporary_prefix(target, os.getpid())}{secrets.token_hex(4)}'
    try:
        if made:
            target.parent.mkdir(parents=True)
        recover_abandoned(target, say)
        workdir.mkdir(mode=0o700)  # only this user's; new/ inside gets the old folder's mode
        new = workdir / NEW
        new.mkdir()
        fill(workdir, new)
        if target.is_dir():
            os.chmod(new, stat.S_IMODE(target.stat().st_mode))
    except BaseException:
        with signals_held():
            clean_up(workdir, made, say)
        raise
    with signals_held():
        try:
            swap_in(new, target, workdir)
        except SwapError:
            raise  # the old folder is still in workdir: it stays, and the message says where
        except BaseException:
            clean_up(workdir, made, say)
            raise
        clean_up(workdir, [], say)


def clean_up(workdir: Path, made: list[Path], say) -> None:
    """Remove workdir, then the parent folders that were made for it if they are empty; say what could not go."""
    problem = remove(workdir)
    if problem is not None:
        say(said_removal(workdir, problem, ''))
    for folder in made:
        with contextlib.suppress(OSError):  # not empty (another run's, or workdir stayed): leave it
            folder.rmdir()


if __name__ == '__main__':
    import cli  # standard library only, like this module

    cli.run(cli.module_main('Replace a folder as a whole: build the new one beside it, then swap it in with two '
                            'renames (a step of prepare.py).', f'{cli.python_command()} prepare.py'))
