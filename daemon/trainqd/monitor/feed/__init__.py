"""The Pipe mode feeder: channels streamed into FIFOs while the trainer reads them."""
