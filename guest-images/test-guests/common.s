# Shared runtime of the Ferrovirt test guests (GNU as, x86-64, AT&T syntax).
#
# Boot: two entry points into the same code.
#   * ELF entry `start64`: ferrovirt's VMM enters here in 64-bit long mode (its own identity page
#     tables and GDT, selectors 0x08 code / 0x10 data, rsi = boot_params).
#   * PVH entry `pvh_start32` (XEN_ELFNOTE_PHYS32_ENTRY note): QEMU enters here in 32-bit flat
#     protected mode without paging; it enables long mode and jumps to start64.
# Either way start64 loads the guest's own static page tables (identity map of the low 4 GiB with
# 2 MiB pages, so the virtio-mmio windows are reachable) and GDT, sets a stack and calls `main`.
#
# No interrupts are used (interrupts stay disabled, there is no IDT): devices are polled. PVM
# emulates guest kernel mode instruction by instruction, so the code is short and uses only plain
# integer instructions, port I/O and MMIO (no `int N`, no SSE, no fences).
#
# Results go to the 16550 UART at COM1 (0x3f8) as lines `TEST <what> ...`.
#
# Power-off: a 32-bit write of the exit code to port 0xf4 (ferrovirt's power-off port; QEMU's
# `isa-debug-exit,iobase=0xf4,iosize=4` device exits with status code*2+1), then, if still
# running, the i8042 reset command (0xfe to port 0x64), then `hlt` forever.
#
# virtio-mmio discovery (modern, version 2 only): the guest scans fixed windows and takes the
# first device with the wanted DeviceID:
#   * ferrovirt's VMM: 0xd0000000 + i * 0x1000, i < 16
#   * QEMU microvm:    0xfeb00000 + i * 0x200,  i < 24 (run QEMU with
#                      `-global virtio-mmio.force-legacy=false`)

    .set COM1, 0x3f8
    .set POWER_OFF_PORT, 0xf4
    .set VIRTIO_MAGIC, 0x74726976
    .set VM_VERSION, 0x004
    .set VM_DEVICE_ID, 0x008
    .set VM_DEV_FEATURES, 0x010
    .set VM_DEV_FEATURES_SEL, 0x014
    .set VM_DRV_FEATURES, 0x020
    .set VM_DRV_FEATURES_SEL, 0x024
    .set VM_QUEUE_SEL, 0x030
    .set VM_QUEUE_NUM_MAX, 0x034
    .set VM_QUEUE_NUM, 0x038
    .set VM_QUEUE_READY, 0x044
    .set VM_QUEUE_NOTIFY, 0x050
    .set VM_STATUS, 0x070
    .set VM_QUEUE_DESC_LO, 0x080
    .set VM_QUEUE_DESC_HI, 0x084
    .set VM_QUEUE_AVAIL_LO, 0x090
    .set VM_QUEUE_AVAIL_HI, 0x094
    .set VM_QUEUE_USED_LO, 0x0a0
    .set VM_QUEUE_USED_HI, 0x0a4
    .set VM_CONFIG, 0x100

    # Every queue has 8 entries and one 4 KiB page: descriptors, avail ring, used ring, and the
    # index of the next used entry the guest has not consumed yet.
    .set QSIZE, 8
    .set Q_DESC, 0x000
    .set Q_AVAIL, 0x100
    .set Q_USED, 0x200
    .set Q_LAST_USED, 0x300
    .set VIRTQ_DESC_F_NEXT, 1
    .set VIRTQ_DESC_F_WRITE, 2

    # About 13 s at 2.6 GHz: how long a guest waits for a device to use a buffer.
    .set TIMEOUT_CYCLES, 0x800000000

# say "text": prints a string (escapes such as \n allowed).
.macro say msg
    .pushsection .rodata
.Lstr\@: .asciz "\msg"
    .popsection
    movl $.Lstr\@, %esi
    call puts
.endm

# fail "text": prints the text and powers off.
.macro fail msg
    say "\msg"
    jmp power_off
.endm

    .section .note.pvh, "a"
    .balign 4
    .long 4
    .long 4
    .long 18                    # XEN_ELFNOTE_PHYS32_ENTRY
    .asciz "Xen"
    .long pvh_start32

    .section .text.boot, "ax"
    .code32
pvh_start32:
    cli
    movl $pml4, %eax
    movl %eax, %cr3
    movl %cr4, %eax
    orl $0x20, %eax             # PAE
    movl %eax, %cr4
    movl $0xc0000080, %ecx      # EFER
    rdmsr
    orl $0x100, %eax            # LME
    wrmsr
    movl %cr0, %eax
    orl $0x80000001, %eax       # PG | PE
    movl %eax, %cr0
    lgdt gdt_ptr
    ljmp $0x08, $start64

    .code64
    .globl start64
start64:
    cli
    movl $pml4, %eax
    movq %rax, %cr3
    lgdt gdt_ptr
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl $stack_top, %esp
    call main
    # fall through

    .globl power_off
power_off:
    movw $POWER_OFF_PORT, %dx
    xorl %eax, %eax
    outl %eax, %dx
    movb $0xfe, %al
    outb %al, $0x64
1:  cli
    hlt
    jmp 1b

    .text
# putc: al = byte. Waits for THR empty (LSR bit 5). Clobbers dx, r8.
putc:
    movl %eax, %r8d
    movw $COM1 + 5, %dx
1:  inb %dx, %al
    testb $0x20, %al
    jz 1b
    movl %r8d, %eax
    movw $COM1, %dx
    outb %al, %dx
    ret

# puts: rsi = NUL-terminated string. Clobbers rax, rsi, dx, r8.
puts:
1:  movb (%rsi), %al
    testb %al, %al
    jz 2f
    call putc
    incq %rsi
    jmp 1b
2:  ret

# puthex: rax = value, ecx = number of hex digits. Clobbers rax, rcx, dx, r8-r10.
puthex:
    movq %rax, %r9
    movl %ecx, %r10d
1:  testl %r10d, %r10d
    jz 2f
    decl %r10d
    leal (,%r10d,4), %ecx
    movq %r9, %rax
    shrq %cl, %rax
    andl $0xf, %eax
    movb hexdigits(%rax), %al
    call putc
    jmp 1b
2:  ret

# memeq: rsi, rdi, ecx = length. ZF set when equal. Clobbers al, rsi, rdi, ecx.
memeq:
    testl %ecx, %ecx
    jz 2f
1:  movb (%rsi), %al
    cmpb (%rdi), %al
    jne 2f
    incq %rsi
    incq %rdi
    decl %ecx
    jnz 1b
2:  ret

# virtio_find: edi = DeviceID. Returns rax = base of the first matching virtio-mmio v2 device,
# or 0. Clobbers rcx, r8.
virtio_find:
    movl $0xd0000000, %eax
    movl $16, %ecx
    movl $0x1000, %r8d
    call 1f
    testq %rax, %rax
    jnz 3f
    movl $0xfeb00000, %eax
    movl $24, %ecx
    movl $0x200, %r8d
1:  cmpl $VIRTIO_MAGIC, (%rax)
    jne 2f
    cmpl $2, VM_VERSION(%rax)
    jne 2f
    cmpl %edi, VM_DEVICE_ID(%rax)
    je 3f
2:  addq %r8, %rax
    decl %ecx
    jnz 1b
    xorl %eax, %eax
3:  ret

# virtio_init: rbx = device base, edi = feature bits 0-31 the driver wants. Resets the device,
# acknowledges it, negotiates VIRTIO_F_VERSION_1 plus the wanted bits the device offers.
# Returns eax = accepted bits 0-31. Powers off on failure. Clobbers rax, r9.
virtio_init:
    movl $0, VM_STATUS(%rbx)
    movl $1, VM_STATUS(%rbx)            # ACKNOWLEDGE
    movl $3, VM_STATUS(%rbx)            # DRIVER
    movl $1, VM_DEV_FEATURES_SEL(%rbx)
    testl $1, VM_DEV_FEATURES(%rbx)     # VIRTIO_F_VERSION_1 (bit 32)
    jnz 1f
    fail "TEST virtio FAIL device does not offer VIRTIO_F_VERSION_1\n"
1:  movl $0, VM_DEV_FEATURES_SEL(%rbx)
    movl VM_DEV_FEATURES(%rbx), %eax
    andl %edi, %eax
    movl %eax, %r9d
    movl $0, VM_DRV_FEATURES_SEL(%rbx)
    movl %r9d, VM_DRV_FEATURES(%rbx)
    movl $1, VM_DRV_FEATURES_SEL(%rbx)
    movl $1, VM_DRV_FEATURES(%rbx)
    movl $0xb, VM_STATUS(%rbx)          # FEATURES_OK
    testl $8, VM_STATUS(%rbx)
    jnz 2f
    fail "TEST virtio FAIL FEATURES_OK not accepted\n"
2:  movl %r9d, %eax
    ret

# virtio_queue: rbx = base, ecx = queue index, rdx = queue page. Powers off on failure.
# Clobbers rax.
virtio_queue:
    movl %ecx, VM_QUEUE_SEL(%rbx)
    cmpl $QSIZE, VM_QUEUE_NUM_MAX(%rbx)
    jae 1f
    fail "TEST virtio FAIL queue too small\n"
1:  movl $QSIZE, VM_QUEUE_NUM(%rbx)
    leaq Q_DESC(%rdx), %rax
    movl %eax, VM_QUEUE_DESC_LO(%rbx)
    movl $0, VM_QUEUE_DESC_HI(%rbx)
    leaq Q_AVAIL(%rdx), %rax
    movl %eax, VM_QUEUE_AVAIL_LO(%rbx)
    movl $0, VM_QUEUE_AVAIL_HI(%rbx)
    leaq Q_USED(%rdx), %rax
    movl %eax, VM_QUEUE_USED_LO(%rbx)
    movl $0, VM_QUEUE_USED_HI(%rbx)
    movl $1, VM_QUEUE_READY(%rbx)
    ret

# virtio_driver_ok: rbx = base.
virtio_driver_ok:
    movl $0xf, VM_STATUS(%rbx)          # ACKNOWLEDGE | DRIVER | FEATURES_OK | DRIVER_OK
    ret

# vq_desc: rdx = queue page, ecx = descriptor index, rsi = address, r8d = length,
# r9d = flags | next << 16. Clobbers rax.
vq_desc:
    movl %ecx, %eax
    shll $4, %eax
    movq %rsi, Q_DESC(%rdx,%rax)
    movl %r8d, Q_DESC + 8(%rdx,%rax)
    movl %r9d, Q_DESC + 12(%rdx,%rax)
    ret

# vq_kick: rbx = base, ecx = queue index, rdx = queue page, eax = head descriptor.
# Publishes the chain in the avail ring and notifies the device. Clobbers r8, r9.
vq_kick:
    movzwl Q_AVAIL + 2(%rdx), %r8d
    movl %r8d, %r9d
    andl $QSIZE - 1, %r9d
    movw %ax, Q_AVAIL + 4(%rdx,%r9,2)
    incl %r8d
    movw %r8w, Q_AVAIL + 2(%rdx)
    movl %ecx, VM_QUEUE_NOTIFY(%rbx)
    ret

# vq_wait: rdx = queue page. Waits until the device returns a chain in the used ring.
# Returns eax = the used length, or -1 after TIMEOUT_CYCLES. Preserves rdx.
# Clobbers rcx, r10, r11.
vq_wait:
    movq %rdx, %r11
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
    movabsq $TIMEOUT_CYCLES, %r10
    addq %rdx, %r10
1:  movzwl Q_USED + 2(%r11), %eax
    cmpw Q_LAST_USED(%r11), %ax
    jne 2f
    pause
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
    cmpq %r10, %rdx
    jb 1b
    movq %r11, %rdx
    movl $-1, %eax
    ret
2:  movzwl Q_LAST_USED(%r11), %ecx
    andl $QSIZE - 1, %ecx
    movl Q_USED + 8(%r11,%rcx,8), %eax
    incw Q_LAST_USED(%r11)
    movq %r11, %rdx
    ret

    .section .rodata
hexdigits:
    .ascii "0123456789abcdef"

    .data
    .balign 4096
pml4:
    .quad pdpt + 3
    .fill 511, 8, 0
pdpt:
    .quad pd + 3
    .quad pd + 0x1000 + 3
    .quad pd + 0x2000 + 3
    .quad pd + 0x3000 + 3
    .fill 508, 8, 0
pd:
    .set page, 0
    .rept 2048
    .if page >= 1536
    .quad (page << 21) | 0x9b     # 3-4 GiB: MMIO, uncached (PCD | PWT)
    .else
    .quad (page << 21) | 0x83     # present, writable, 2 MiB
    .endif
    .set page, page + 1
    .endr

    .balign 16
gdt:
    .quad 0
    .quad 0x00af9b000000ffff      # 0x08: 64-bit code
    .quad 0x00cf93000000ffff      # 0x10: data
gdt_end:
gdt_ptr:
    .word gdt_end - gdt - 1
    .quad gdt

    .bss
    .balign 4096
stack:
    .skip 8192
stack_top:
