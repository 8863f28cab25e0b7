# Test guest: triple fault. Prints `TEST fault start`, loads an empty IDT and executes `ud2`:
# the #UD cannot be delivered, nor the double fault that follows, so the CPU shuts down (a
# triple fault: KVM_EXIT_SHUTDOWN in our VMM; with -no-reboot QEMU exits).
    .include "common.s"
    .text
main:
    say "TEST fault start\n"
    lidt empty_idt
    ud2
    fail "TEST fault FAIL still running after ud2\n"

    .data
    .balign 16
empty_idt:
    .word 0
    .quad 0
