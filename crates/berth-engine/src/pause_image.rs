//! berth's own *pause* image, made offline: the tiny program that holds a task's shared
//! namespaces (network, and optionally PID and IPC) while the task's containers join it with
//! `container:<pause>`. Provisioning it in the container engine is
//! [`crate::pause_provision`]'s, so this module, which the create spec names the image from,
//! reaches no runtime code.
//!
//! This module owns:
//! - the pause program, a static x86_64 Linux ELF executable assembled here from hand-written
//!   machine code ([`program`]): it exits 0 at once on SIGTERM or SIGINT, reaps every zombie on
//!   SIGCHLD (in a shared PID namespace it is PID 1 and inherits the orphans of every container),
//!   and otherwise sleeps in `pause()`;
//! - its image: the name [`image_name`] (`berth/pause:1-<first 12 hex of the program's sha256>`,
//!   so a berth whose program differs never takes another berth's image for its own), the root
//!   filesystem [`rootfs_tar`] (one file, `/pause`) and the Dockerfile instructions of the import
//!   [`import_changes`].
//!
//! All of it is pure (the repository name, [`PAUSE_REPOSITORY`], is [`crate::pause`]'s, which the
//! task state imports). The program exists for
//! x86_64 only: elsewhere [`rootfs_tar`] answers [`PauseImageError::UnsupportedArch`], which names
//! the agent option (`--pause-image`) that gives berth a pause image of one's own.

pub use crate::pause::PAUSE_REPOSITORY;
use sha2::{Digest, Sha256};

/// The version of the image's layout (file name, import changes); the tag's first part.
const LAYOUT_VERSION: &str = "1";

/// The architecture the built-in program is written for (`std::env::consts::ARCH` spelling).
pub const PROGRAM_ARCH: &str = "x86_64";

/// The path of the program inside the image.
pub const PROGRAM_PATH: &str = "/pause";

/// Why the pause image cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum PauseImageError {
    /// The built-in program is x86_64 machine code.
    #[error(
        "the built-in pause image exists for x86_64 only, and this machine is {arch}: give berth a \
         pause image of your own with the agent option --pause-image <image> (any image whose \
         default command sleeps until SIGTERM and reaps its children, such as \
         registry.k8s.io/pause, loaded into the local engine)"
    )]
    UnsupportedArch { arch: String },
    /// Writing the tar stream failed (in memory: not expected).
    #[error("cannot build the pause image's root filesystem tar: {0}")]
    Tar(#[from] std::io::Error),
}

// The program: a whole ELF file is a 64-byte file header, two 56-byte program headers and the
// code. It is written by hand because no crate ships a ready-made pause executable and a C
// toolchain is not there at run time; the code was assembled with GNU `as` (Intel syntax) and its
// bytes checked with `objdump -d`, and the assembly sits beside the bytes below. Written the same
// way every time, so the file (and the image name derived from it) is reproducible.

/// Where the kernel maps the file (a fixed address: the program is an `ET_EXEC`, not a PIE).
const LOAD_ADDRESS: u64 = 0x40_0000;
const ELF_HEADER_SIZE: u16 = 64;
const PROGRAM_HEADER_SIZE: u16 = 56;
const PROGRAM_HEADERS: u16 = 2;
/// The code follows the headers: file offset 0xb0, address 0x4000b0.
const CODE_OFFSET: u64 = ELF_HEADER_SIZE as u64 + (PROGRAM_HEADER_SIZE * PROGRAM_HEADERS) as u64;

/// The machine code (x86_64, position independent: handlers are found with RIP-relative `lea`).
/// Offsets are from the start of the code. The kernel's `struct sigaction` for x86_64 is
/// `{ handler, flags, restorer, mask }`, 8 bytes each; x86_64 requires `SA_RESTORER` and a
/// restorer that calls `rt_sigreturn`, since there is no libc to provide one.
#[rustfmt::skip]
const CODE: [u8; 0xb5] = [
    // _start:
    0x48, 0x83, 0xec, 0x20,                         // 00: sub  rsp, 32          ; struct sigaction on the stack
    0x48, 0x89, 0xe3,                               // 04: mov  rbx, rsp         ; rbx = &act (kept across calls)
    0x48, 0x8d, 0x05, 0x7b, 0x00, 0x00, 0x00,       // 07: lea  rax, [rip+0x7b]  ; on_term (0x89)
    0x48, 0x89, 0x03,                               // 0e: mov  [rbx], rax       ; act.handler = on_term
    0x48, 0xc7, 0x43, 0x08, 0x00, 0x00, 0x00, 0x04, // 11: mov  qword [rbx+8], 0x04000000 ; flags = SA_RESTORER
    0x48, 0x8d, 0x05, 0x8e, 0x00, 0x00, 0x00,       // 19: lea  rax, [rip+0x8e]  ; restorer (0xae)
    0x48, 0x89, 0x43, 0x10,                         // 20: mov  [rbx+16], rax    ; act.restorer = restorer
    0x48, 0xc7, 0x43, 0x18, 0x00, 0x00, 0x00, 0x00, // 24: mov  qword [rbx+24], 0 ; act.mask = {}
    0xbf, 0x0f, 0x00, 0x00, 0x00,                   // 2c: mov  edi, 15          ; SIGTERM
    0xe8, 0x34, 0x00, 0x00, 0x00,                   // 31: call set              ; (0x6a)
    0xbf, 0x02, 0x00, 0x00, 0x00,                   // 36: mov  edi, 2           ; SIGINT
    0xe8, 0x2a, 0x00, 0x00, 0x00,                   // 3b: call set
    0x48, 0x8d, 0x05, 0x4b, 0x00, 0x00, 0x00,       // 40: lea  rax, [rip+0x4b]  ; on_chld (0x92)
    0x48, 0x89, 0x03,                               // 47: mov  [rbx], rax       ; act.handler = on_chld
    0x48, 0xc7, 0x43, 0x08, 0x01, 0x00, 0x00, 0x14, // 4a: mov  qword [rbx+8], 0x14000001
                                                    //     ; SA_RESTORER | SA_RESTART | SA_NOCLDSTOP
    0xbf, 0x11, 0x00, 0x00, 0x00,                   // 52: mov  edi, 17          ; SIGCHLD
    0xe8, 0x0e, 0x00, 0x00, 0x00,                   // 57: call set
    0xe8, 0x31, 0x00, 0x00, 0x00,                   // 5c: call on_chld          ; reap what is already dead
    // 1:
    0xb8, 0x22, 0x00, 0x00, 0x00,                   // 61: mov  eax, 34          ; pause()
    0x0f, 0x05,                                     // 66: syscall
    0xeb, 0xf7,                                     // 68: jmp  1b               ; (0x61) after each signal
    // set: rt_sigaction(edi, rbx, NULL, 8); exit 2 if the kernel refuses
    0xb8, 0x0d, 0x00, 0x00, 0x00,                   // 6a: mov  eax, 13          ; rt_sigaction
    0x48, 0x89, 0xde,                               // 6f: mov  rsi, rbx         ; &act
    0x31, 0xd2,                                     // 72: xor  edx, edx         ; no old action
    0x41, 0xba, 0x08, 0x00, 0x00, 0x00,             // 74: mov  r10d, 8          ; sizeof(sigset_t)
    0x0f, 0x05,                                     // 7a: syscall
    0x48, 0x85, 0xc0,                               // 7c: test rax, rax
    0x75, 0x01,                                     // 7f: jne  fail             ; (0x82)
    0xc3,                                           // 81: ret
    // fail:
    0xbf, 0x02, 0x00, 0x00, 0x00,                   // 82: mov  edi, 2           ; exit status 2
    0xeb, 0x02,                                     // 87: jmp  quit             ; (0x8b)
    // on_term: the SIGTERM and SIGINT handler
    0x31, 0xff,                                     // 89: xor  edi, edi         ; exit status 0
    // quit:
    0xb8, 0xe7, 0x00, 0x00, 0x00,                   // 8b: mov  eax, 231         ; exit_group(edi)
    0x0f, 0x05,                                     // 90: syscall
    // on_chld: the SIGCHLD handler; wait4(-1, NULL, WNOHANG, NULL) until it answers 0 (children
    // left, none dead) or an error (ECHILD: no children). Registers need not be kept: the kernel
    // restores them all at rt_sigreturn.
    0xb8, 0x3d, 0x00, 0x00, 0x00,                   // 92: mov  eax, 61          ; wait4
    0xbf, 0xff, 0xff, 0xff, 0xff,                   // 97: mov  edi, -1          ; any child
    0x31, 0xf6,                                     // 9c: xor  esi, esi         ; no status
    0xba, 0x01, 0x00, 0x00, 0x00,                   // 9e: mov  edx, 1           ; WNOHANG
    0x45, 0x31, 0xd2,                               // a3: xor  r10d, r10d       ; no rusage
    0x0f, 0x05,                                     // a6: syscall
    0x48, 0x85, 0xc0,                               // a8: test rax, rax
    0x7f, 0xe5,                                     // ab: jg   on_chld          ; (0x92) reaped one: again
    0xc3,                                           // ad: ret                   ; to the restorer
    // restorer: where a handler returns to
    0xb8, 0x0f, 0x00, 0x00, 0x00,                   // ae: mov  eax, 15          ; rt_sigreturn
    0x0f, 0x05,                                     // b3: syscall
];

fn push_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn push_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// The pause program: a complete static x86_64 Linux ELF executable (a few hundred bytes). The
/// bytes are the same on every machine; only x86_64 can run them.
pub fn program() -> Vec<u8> {
    let file_size = CODE_OFFSET + CODE.len() as u64;
    let mut out = Vec::with_capacity(usize::try_from(file_size).unwrap_or(0));
    // ELF header. e_ident: magic, ELFCLASS64, ELFDATA2LSB, EV_CURRENT, ELFOSABI_SYSV, padding.
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    out.extend_from_slice(&[0; 8]);
    push_u16(&mut out, 2); // e_type: ET_EXEC
    push_u16(&mut out, 62); // e_machine: EM_X86_64
    push_u32(&mut out, 1); // e_version
    push_u64(&mut out, LOAD_ADDRESS + CODE_OFFSET); // e_entry: _start
    push_u64(&mut out, u64::from(ELF_HEADER_SIZE)); // e_phoff: right after this header
    push_u64(&mut out, 0); // e_shoff: no section headers
    push_u32(&mut out, 0); // e_flags
    push_u16(&mut out, ELF_HEADER_SIZE); // e_ehsize
    push_u16(&mut out, PROGRAM_HEADER_SIZE); // e_phentsize
    push_u16(&mut out, PROGRAM_HEADERS); // e_phnum
    push_u16(&mut out, 64); // e_shentsize (no sections follow)
    push_u16(&mut out, 0); // e_shnum
    push_u16(&mut out, 0); // e_shstrndx: SHN_UNDEF
    // PT_LOAD: the whole file, read and execute, at LOAD_ADDRESS.
    push_u32(&mut out, 1); // p_type: PT_LOAD
    push_u32(&mut out, 4 | 1); // p_flags: PF_R | PF_X
    push_u64(&mut out, 0); // p_offset
    push_u64(&mut out, LOAD_ADDRESS); // p_vaddr
    push_u64(&mut out, LOAD_ADDRESS); // p_paddr
    push_u64(&mut out, file_size); // p_filesz
    push_u64(&mut out, file_size); // p_memsz
    push_u64(&mut out, 0x1000); // p_align
    // PT_GNU_STACK: the stack is read and write, not executable.
    push_u32(&mut out, 0x6474_e551); // p_type: PT_GNU_STACK
    push_u32(&mut out, 4 | 2); // p_flags: PF_R | PF_W
    for _ in 0..5 {
        push_u64(&mut out, 0); // p_offset, p_vaddr, p_paddr, p_filesz, p_memsz
    }
    push_u64(&mut out, 16); // p_align
    out.extend_from_slice(&CODE);
    out
}

/// Lower-case hex of the program's sha256.
fn program_sha256() -> String {
    Sha256::digest(program())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The tag of the built-in image: `1-<first 12 hex of the program's sha256>`. It changes whenever
/// the program's bytes do (or the image's layout version), so an image that an older berth
/// imported is never taken for this one.
pub fn image_tag() -> String {
    let sha = program_sha256();
    format!("{LAYOUT_VERSION}-{}", &sha[..12])
}

/// The built-in pause image's name, `berth/pause:<tag>` (see [`image_tag`]).
pub fn image_name() -> String {
    format!("{PAUSE_REPOSITORY}:{}", image_tag())
}

/// Refuses an architecture the program cannot run on.
fn check_arch(arch: &str) -> Result<(), PauseImageError> {
    if arch == PROGRAM_ARCH {
        Ok(())
    } else {
        Err(PauseImageError::UnsupportedArch {
            arch: arch.to_string(),
        })
    }
}

/// The image's root filesystem: a tar stream holding only `/pause` (mode 0755, owned by root,
/// modification time 0, so the bytes are the same every time). Refused on a machine that is not
/// x86_64 ([`PauseImageError::UnsupportedArch`]).
pub fn rootfs_tar() -> Result<Vec<u8>, PauseImageError> {
    check_arch(std::env::consts::ARCH)?;
    let program = program();
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(program.len() as u64);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    builder.append_data(
        &mut header,
        PROGRAM_PATH.trim_start_matches('/'),
        program.as_slice(),
    )?;
    Ok(builder.into_inner()?)
}

/// The Dockerfile instructions applied by the import: the program is the default command, and
/// the label `berth.pause=1` marks the image as berth's. No `STOPSIGNAL`: Docker 20.10 (API
/// 1.41) refuses it in an import ("stopsignal is not a valid change command"), and SIGTERM is
/// the default stop signal anyway.
pub fn import_changes() -> Vec<String> {
    vec![
        format!("CMD [\"{PROGRAM_PATH}\"]"),
        "LABEL berth.pause=1".to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::elf;
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    use object::{Endianness, Object};

    #[test]
    fn the_program_is_a_well_formed_static_x86_64_executable() {
        let bytes = program();
        let file = ElfFile64::<Endianness>::parse(bytes.as_slice()).expect("parses as ELF64");
        assert_eq!(file.architecture(), object::Architecture::X86_64);
        assert!(file.is_little_endian());
        assert_eq!(file.kind(), object::ObjectKind::Executable);
        let header = file.elf_header();
        let e = file.endian();
        assert_eq!(header.e_type(e), elf::ET_EXEC);
        assert_eq!(file.entry(), LOAD_ADDRESS + CODE_OFFSET);
        let segments = header.program_headers(e, bytes.as_slice()).expect("phdrs");
        assert_eq!(segments.len(), 2);
        let load = &segments[0];
        assert_eq!(load.p_type(e), elf::PT_LOAD);
        assert_eq!(load.p_flags(e), elf::PF_R | elf::PF_X);
        assert_eq!(load.p_offset(e), 0);
        assert_eq!(load.p_vaddr(e), LOAD_ADDRESS);
        assert_eq!(load.p_filesz(e), bytes.len() as u64, "maps the whole file");
        let entry = file.entry();
        assert!(
            (load.p_vaddr(e)..load.p_vaddr(e) + load.p_memsz(e)).contains(&entry),
            "the entry point is mapped"
        );
        assert_eq!(segments[1].p_type(e), elf::PT_GNU_STACK);
        assert_eq!(
            segments[1].p_flags(e) & elf::PF_X,
            elf::ProgramFlags(0),
            "no executable stack"
        );
        // Static: no interpreter, no dynamic section.
        assert!(
            segments
                .iter()
                .all(|p| p.p_type(e) != elf::PT_INTERP && p.p_type(e) != elf::PT_DYNAMIC)
        );
        assert!(bytes.len() < 512, "{} bytes", bytes.len());
    }

    #[test]
    fn the_code_makes_the_syscalls_the_listing_says() {
        // Spot checks that the bytes and the listing agree: rt_sigaction for SIGTERM, SIGINT and
        // SIGCHLD, the reap loop's wait4(-1, NULL, WNOHANG) and the restorer's rt_sigreturn.
        let find = |needle: &[u8]| CODE.windows(needle.len()).position(|w| w == needle);
        assert_eq!(find(&[0xbf, 15, 0, 0, 0]), Some(0x2c), "mov edi, SIGTERM");
        assert_eq!(
            find(&[0xbf, 2, 0, 0, 0, 0xe8]),
            Some(0x36),
            "mov edi, SIGINT"
        );
        assert_eq!(find(&[0xbf, 17, 0, 0, 0]), Some(0x52), "mov edi, SIGCHLD");
        assert_eq!(find(&[0xb8, 13, 0, 0, 0]), Some(0x6a), "rt_sigaction");
        assert_eq!(find(&[0xb8, 61, 0, 0, 0]), Some(0x92), "wait4");
        assert_eq!(find(&[0xb8, 231, 0, 0, 0]), Some(0x8b), "exit_group");
        assert_eq!(
            &CODE[0xae..],
            &[0xb8, 15, 0, 0, 0, 0x0f, 0x05],
            "rt_sigreturn"
        );
        // The lea targets: rip (end of the instruction) + displacement.
        let lea = |at: usize| at + 7 + usize::from(CODE[at + 3]);
        assert_eq!(lea(0x07), 0x89, "on_term");
        assert_eq!(lea(0x19), 0xae, "restorer");
        assert_eq!(lea(0x40), 0x92, "on_chld");
    }

    #[test]
    fn the_tar_holds_exactly_the_program_at_pause_with_mode_0755() {
        let tar = rootfs_tar().expect("x86_64");
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut entries = Vec::new();
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let header = entry.header().clone();
            let path = entry.path().expect("path").display().to_string();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).expect("read");
            entries.push((path, header, data));
        }
        assert_eq!(entries.len(), 1, "one entry");
        let (path, header, data) = &entries[0];
        assert_eq!(path, "pause");
        assert_eq!(header.entry_type(), tar::EntryType::Regular);
        assert_eq!(header.mode().expect("mode"), 0o755);
        assert_eq!(header.uid().expect("uid"), 0);
        assert_eq!(header.gid().expect("gid"), 0);
        assert_eq!(header.mtime().expect("mtime"), 0);
        assert_eq!(data, &program());
        assert_eq!(rootfs_tar().expect("again"), tar, "reproducible bytes");
    }

    #[test]
    fn the_name_is_stable_and_follows_the_program() {
        let name = image_name();
        assert_eq!(name, image_name());
        let tag = name
            .strip_prefix("berth/pause:1-")
            .expect("berth/pause:1-<hex>");
        assert_eq!(tag.len(), 12);
        assert!(
            tag.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert!(program_sha256().starts_with(tag));
        // Pinned: a change to the program must change this line too (and so the image name).
        assert_eq!(name, "berth/pause:1-de344130d61b");
    }

    /// The program run on this machine (x86_64 Linux only): it stays up until a signal, and
    /// SIGTERM or SIGINT ends it at once with status 0.
    #[test]
    fn the_program_runs_here_and_exits_0_on_sigterm_and_sigint() {
        if std::env::consts::ARCH != PROGRAM_ARCH || std::env::consts::OS != "linux" {
            eprintln!("skipped: the pause program runs on x86_64 Linux only");
            return;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pause");
        std::fs::write(&path, program()).expect("write");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        for signal in ["TERM", "INT"] {
            // Another test thread forking while the file was open for writing makes exec fail
            // with ETXTBSY for a moment: try again.
            let mut child = (0..50)
                .find_map(|_| match std::process::Command::new(&path).spawn() {
                    Ok(child) => Some(child),
                    Err(e) if e.raw_os_error() == Some(26) => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        None
                    }
                    Err(e) => panic!("run the pause program: {e}"),
                })
                .expect("the program starts");
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(child.try_wait().expect("wait").is_none(), "still running");
            let sent = std::process::Command::new("kill")
                .args([format!("-{signal}"), child.id().to_string()])
                .status()
                .expect("kill");
            assert!(sent.success());
            let started = std::time::Instant::now();
            let status = child.wait().expect("wait");
            assert_eq!(status.code(), Some(0), "SIG{signal}: {status:?}");
            assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }
    }

    #[test]
    fn other_architectures_are_refused_with_the_option_to_use() {
        let e = check_arch("aarch64").expect_err("refused");
        let text = e.to_string();
        assert!(text.contains("x86_64 only"), "{text}");
        assert!(text.contains("aarch64"), "{text}");
        assert!(text.contains("--pause-image"), "{text}");
        assert!(check_arch("x86_64").is_ok());
    }

    #[test]
    fn the_changes_set_the_command_and_the_label() {
        let changes = import_changes();
        assert!(changes.contains(&"CMD [\"/pause\"]".to_string()));
        assert!(changes.iter().any(|c| c.starts_with("LABEL berth.pause=")));
    }
}
